"""The test matrix is written once, in tests/legs.txt: README.md's torch table
must say the same (versions, torchvision pairing, default, what each leg does)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COLUMNS = ("torch", "torchvision", "cuda", "wheel", "rehearse", "tests")


def legs():
    rows = []
    for line in (ROOT / "tests" / "legs.txt").read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            assert len(line) == len(COLUMNS), f"tests/legs.txt: {line} does not have the columns {COLUMNS}"
            rows.append(dict(zip(COLUMNS, line)))
    return rows


def readme_table():
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Supported PyTorch\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README.md has no '## Supported PyTorch' section"
    rows = [line for line in section.group(1).splitlines() if line.startswith("|")]
    assert len(rows) > 2, "the README's Supported PyTorch section has no table"
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]  # header, rule
    table = []
    for row in cells:
        torch_version = re.match(r"`?(\d+\.\d+\.\d+)", row[0])
        assert torch_version, f"README torch table: first cell {row[0]!r} is not a torch version"
        vision = re.match(r"`?(\d+\.\d+\.\d+)", row[1])
        table.append({"torch": torch_version.group(1), "torchvision": vision.group(1) if vision else "-",
                      "default": "default" in row[0], "text": " ".join(row[2:]).lower()})
    return table


def test_legs_table_is_well_formed():
    rows = legs()
    assert rows, "tests/legs.txt lists no leg"
    assert len({r["torch"] for r in rows}) == len(rows), "a torch version is listed twice"
    for r in rows:
        assert re.fullmatch(r"\d+\.\d+\.\d+", r["torch"]), r
        assert r["torchvision"] == "-" or re.fullmatch(r"\d+\.\d+\.\d+", r["torchvision"]), r
        assert r["cuda"] in ("ON", "OFF") and r["wheel"] in ("0", "1") and r["rehearse"] in ("0", "1"), r
        assert r["tests"] in ("all", "torch", "fast"), r
    assert sum(r["rehearse"] == "1" for r in rows) == 1, "exactly one leg runs the GPU check's rehearsal"
    assert rows[0]["tests"] == "all", "the default leg (the first) runs the whole suite"


def test_readme_torch_table_says_what_legs_txt_says():
    rows, table = legs(), readme_table()
    assert [r["torch"] for r in rows] == [t["torch"] for t in table], \
        "README's torch table must list tests/legs.txt's torch versions, in its order"
    for r, t in zip(rows, table):
        where = f"README torch table, torch {r['torch']}"
        assert t["torchvision"] == r["torchvision"], f"{where}: torchvision {t['torchvision']}, legs.txt {r['torchvision']}"
        assert t["default"] == (r is rows[0]), f"{where}: 'default' must mark the first leg only"
        assert ("cuda operator" in t["text"]) == (r["cuda"] == "ON"), f"{where}: says the CUDA operator iff cuda ON"
        assert ("wheel" in t["text"]) == (r["wheel"] == "1"), f"{where}: says wheel iff wheel 1"
        assert ("rehearsal" in t["text"]) == (r["rehearse"] == "1"), f"{where}: says rehearsal iff rehearse 1"
        assert ("whole suite" in t["text"]) == (r["tests"] == "all"), f"{where}: 'whole suite' iff tests all"
        assert ("slow" in t["text"]) == (r["tests"] == "fast"), f"{where}: says slow iff tests fast"
