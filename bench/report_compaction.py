"""Prints bench/compaction.sh's table from its work directory.

    report_compaction.py WORKDIR NAME...

Per build: the upstream calls each recovered overflow cost beyond the turn's
own answer (the refused request, summary calls), and how long the client
waited for turns that were compacted, against turns that were not.
"""
import json
import statistics
import sys
from pathlib import Path

work = Path(sys.argv[1])
rows = []
for name in sys.argv[2:]:
    turns = [json.loads(line) for line in (work / f"{name}.turns").read_text().splitlines()]
    stats = json.loads((work / f"{name}.stats").read_text())
    compacted = [t["seconds"] for t in turns if t["compactions"] > 0]
    plain = [t["seconds"] for t in turns if t["compactions"] == 0]
    calls = sum(stats.values())
    compactions = max(len(compacted), 1)
    rows.append((name, {
        "compactions": len(compacted),
        "overflow 400s": stats["chat_refused"],
        "summary calls": stats["summary_answered"] + stats["summary_refused"],
        "summary calls refused": stats["summary_refused"],
        "upstream calls per recovered overflow": f"{(calls - len(turns)) / compactions:.2f}",
        "compacted turn wait p50 (s)": f"{statistics.median(compacted):.2f}" if compacted else "-",
        "compacted turn wait max (s)": f"{max(compacted):.2f}" if compacted else "-",
        "plain turn wait p50 (s)": f"{statistics.median(plain):.2f}" if plain else "-",
    }))

names = [name for name, _ in rows]
print("| | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for key in rows[0][1]:
    print(f"| {key} | " + " | ".join(str(values[key]) for _, values in rows) + " |")
