"""What the Snakefile checks and looks up while it builds the job graph, as functions of the config
dict that tests can import: the config look-ups the rules share (:mod:`.config_lookups`), the run's
input and setting checks (:mod:`.graph_checks`) and the training jobs' memory plans
(:mod:`.memory_plans`). Nothing here imports torch: every Snakemake start parses the workflow.

The top layer: it reads the registries and settings of every stage below it.
"""
