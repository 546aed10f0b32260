from ramen.data.decontamination import check_decontaminated, write_summary
from ramen.glue import logged

with logged(snakemake.log[0]):
    summary = {}
    for evaluation, texts in snakemake.params.texts.items():
        summary.update(check_decontaminated(
            [evaluation], {name: text for name, (text, _) in texts.items()},
            {name: excluded for name, (_, excluded) in texts.items()},
        ))
    print(summary)
    write_summary(snakemake.output[0], summary)
