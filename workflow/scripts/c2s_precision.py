from ramen.char2subword.pipeline import precision_table, write_precision_table
from ramen.glue import logged

with logged(snakemake.log[0]):
    import torch

    torch.set_num_threads(snakemake.threads)
    params = snakemake.params
    stages = [{"stage": f"approx ({losses})", "module": path} for losses, path in zip(params.table2, snakemake.input.table2)]
    stages += [{"stage": f"approx ({params.main}) -> pre-training", "module": snakemake.input.pretrained},
               {"stage": f"approx ({params.main}) -> pre-training -> approx", "module": snakemake.input.final}]
    evaluation = params.evaluation
    rows = precision_table(
        snakemake.input.model, snakemake.input.data, stages, table_name=snakemake.wildcards.table, eval_rows=evaluation["rows"],
        max_k=evaluation["max_k"], seed=evaluation["seed"], noise_share=params.noise["noise_share"],
        operations=params.noise["operations"], noise_min_length=params.noise["noise_min_length"],
        untrained={"sizes": params.sizes, "seed": params.noise["seed"]}, max_rows=params.noise["max_rows"],
    )
    write_precision_table(rows, snakemake.output[0], evaluation["max_k"])
