"""The one Markdown table and the one doc splicer (issue #46: ``fedsel_eval.markdown``)."""
import pytest

from fedsel_eval.markdown import markers, splice, table


def test_a_plain_table_and_a_padded_one():
    assert table(["policy", "rounds"], [["random", 12.5], ["afl", 9]]) == \
        "| policy | rounds |\n|---|---:|\n| random | 12.5 |\n| afl | 9 |\n"
    assert table(["a", "bb"], [["xyzw", "1"]], align="lc", pad=True) == \
        "| a    |  bb |\n|------|:---:|\n| xyzw |  1  |\n"
    assert table(["p", "v"], [["random", "1.0"]], align="lr", pad=True) == \
        "| p      |   v |\n|--------|----:|\n| random | 1.0 |\n"


def test_a_table_refuses_a_row_or_an_alignment_that_does_not_fit():
    with pytest.raises(ValueError, match="row 1 has 1 cells for 2 headers"):
        table(["a", "b"], [["1", "2"], ["3"]])
    with pytest.raises(ValueError, match="align 'lx'"):
        table(["a", "b"], [], align="lx")


def test_splice_replaces_only_its_own_block_and_keeps_the_text_literally(tmp_path):
    doc = tmp_path / "doc.md"
    a0, a1 = markers("repro:a")
    b0, b1 = markers("bench:b")
    doc.write_text(f"intro\n{a0}\nold a\n{a1}\nmiddle\n{b0}\nold b\n{b1}\nend\n")
    splice(doc, "repro:a", "new a | with $1 and \\1 kept literally\n\n")
    assert doc.read_text() == (f"intro\n{a0}\nnew a | with $1 and \\1 kept literally\n{a1}\nmiddle\n"
                               f"{b0}\nold b\n{b1}\nend\n")
    splice(doc, "bench:c", "fresh c")  # absent markers: appended with its markers
    assert doc.read_text().endswith("end\n\n<!-- bench:c begin -->\nfresh c\n<!-- bench:c end -->\n")


def test_splice_can_refuse_a_document_without_the_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("no markers here\n")
    with pytest.raises(ValueError, match="has no <!-- robustness:table begin -->"):
        splice(doc, "robustness:table", "x", append=False)
    assert doc.read_text() == "no markers here\n"
