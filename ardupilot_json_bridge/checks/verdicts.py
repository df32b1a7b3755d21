"""The vocabulary of a convention check: a verdict with its figures and fix, and a table."""

from dataclasses import dataclass
from typing import Sequence

OK, WRONG, UNDECIDED = 'ok', 'wrong', 'undecided'


@dataclass(frozen=True)
class Check:
    """One verdict: what was checked, the figures measured, and the fix when it is wrong."""

    name: str
    verdict: str
    measured: str
    fix: str = ''


def format_table(checks: Sequence[Check]) -> str:
    """Return the checks as an aligned text table: check, verdict, measured, fix."""
    rows = [('check', 'verdict', 'measured', 'fix')] + [
        (c.name, c.verdict, c.measured, c.fix or '-') for c in checks]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return '\n'.join(f'{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}'
                     for r in rows)
