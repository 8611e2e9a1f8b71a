"""Machine-readable output shared by `summarize` and `compare`: CSV, JSON and markdown
from flat records (dicts with typed values, None where a value is absent).

JSON has no NaN: an undefined number (a ratio with a zero or NaN time) is written as
null, as an absent one is; CSV writes NaN as `nan` and absent as an empty cell, the way
spreadsheets and `csv.DictReader` users expect. The documents follow the JSON Schemas in
schemas/ (described in postprocess/README.md).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any, TextIO

# The output formats of summarize and compare; table is the one for people.
FORMATS = ("table", "csv", "json", "markdown")
# Bumped when a field changes meaning or goes away (adding a field does not).
FORMAT_VERSION = 1


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(fields: Sequence[str], rows: Sequence[dict[str, Any]], out: TextIO) -> None:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(fields)
    for r in rows:
        w.writerow([_cell(r[f]) for f in fields])


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def write_json(doc: dict[str, Any], out: TextIO) -> None:
    json.dump(_json_safe(doc), out, indent=1, allow_nan=False)
    out.write("\n")


def _md(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v).replace("|", "\\|") or "-"


def markdown_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[str]:
    """A GitHub-flavoured markdown table; numbers right-aligned."""
    align = ["---:" if rows and isinstance(rows[0].get(c), (int, float)) and not isinstance(rows[0].get(c), bool)
             else "---" for c in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md(r.get(c)) for c in columns) + " |" for r in rows]
    return lines


def write_records(fmt: str, fields: Sequence[str], rows: Sequence[dict[str, Any]], out: TextIO) -> bool:
    """csv or markdown: writes the rows and returns True; any other format (the table for
    people) is the caller's to write: False."""
    if fmt == "csv":
        write_csv(fields, rows, out)
        return True
    if fmt == "markdown":
        out.write("\n".join(markdown_table(fields, rows)) + "\n")
        return True
    return False


def schema(name: str) -> dict[str, Any]:
    """One of the package's JSON Schemas (schemas/NAME.schema.json)."""
    text = resources.files("ulysses_post").joinpath("schemas", f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)
