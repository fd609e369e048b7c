"""Lecture sources stay readable: at most 1.5x code lines against prose lines, all lectures."""

from tools.source_ratio import LIMIT, count, table

SOURCE = '''# ---
# jupyter:
#   kernelspec:
#     name: python3
# ---

# %% [markdown]
# # Title
#
# Two lines of prose.

# %%
x = 1
# a comment in code counts as code

y = 2
'''


def test_count_separates_prose_from_code_and_skips_blanks_and_the_header():
    assert count(SOURCE) == (3, 2)


def test_the_lectures_read_as_prose_with_code_not_code_with_prose():
    rows = table()
    assert len(rows) >= 10
    code, prose = sum(r[1] for r in rows), sum(r[2] for r in rows)
    assert code <= LIMIT * prose, (f"lecture sources hold {code} code lines against {prose} of prose "
                                   f"({code / prose:.2f}x, limit {LIMIT}x): move plumbing into perfkit")
