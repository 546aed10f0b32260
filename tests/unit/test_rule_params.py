"""A rule says everything its job reads: scripts read their rule's params, never the config."""

from __future__ import annotations

import re
from pathlib import Path

WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"


def rules() -> dict[str, tuple[str, str | None, set[str]]]:
    """{rule: (rule file, script file or None, params names)} of every rule file."""
    found = {}
    for path in sorted((WORKFLOW / "rules").glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.S | re.M):
            name, body = match.groups()
            script = re.search(r'^    script:\n\s+"\.\./scripts/(\w+\.py)"', body, re.M)
            params = re.search(r"^    params:\n(.*?)(?=^    \w+:|\Z)", body, re.S | re.M)
            found[name] = (path.name, script and script.group(1),
                           set(re.findall(r"^        (\w+)=", params.group(1), re.M)) if params else set())
    return found


def test_no_script_reads_the_config():
    readers = [path.name for path in (WORKFLOW / "scripts").glob("*.py")
               if "snakemake.config" in path.read_text(encoding="utf-8")]
    assert readers == [], "pass the setting as a params entry of the rule instead"


def test_every_script_reads_only_params_its_rules_declare():
    found = rules()
    assert len(found) > 40 and found["finetune_xnli"][1] == "finetune_xnli.py"  # the parser sees the rules
    missing = []
    for name, (rule_file, script, params) in found.items():
        if script is None:
            continue
        text = (WORKFLOW / "scripts" / script).read_text(encoding="utf-8")
        read = set(re.findall(r"snakemake\.params\.(\w+)", text)) | set(re.findall(r"snakemake\.params\[[\"'](\w+)", text))
        if read - {"get", "keys", "items"} - params:
            missing.append(f"{rule_file}: rule {name} lacks params {sorted(read - params)} that {script} reads")
    assert missing == []
