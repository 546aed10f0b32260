from pathlib import Path

from ramen.io import write_lines
from ramen.reports.paper import compare, markdown_tables, our_scores, read_paper_tables, write_comparison
from ramen.glue import logged

with logged(snakemake.log[0]):
    paper = read_paper_tables(snakemake.input.paper)
    comparison = compare(paper, our_scores(snakemake.input.results), snakemake.params.variant_inits)
    write_comparison(comparison, snakemake.output.comparison)
    # The initialisation report, when the workflow produced one, is shown with the tables.
    extra = [(f"Initialisation report: {path.name}", path.read_text(encoding="utf-8"))
             for path in sorted(Path(snakemake.output.markdown).parent.glob("init_*"))
             if path.suffix in (".md", ".tsv")]
    text = markdown_tables(paper, comparison, snakemake.params.setting, extra)
    write_lines(snakemake.output.markdown, [text])
    print(text)
