"""Judge a recording as a user would: `ardupilot-json-bridge check BAG --vehicle V`."""

import contextlib
import io
import re
from typing import Dict, List, Tuple

from ardupilot_json_bridge.checks.layout import NAME as LAYOUT
from ardupilot_json_bridge.cli import main


def check_recording(bag: str, vehicle: str) -> Tuple[int, str, Dict[str, List[str]]]:
    """Return check's exit code, its table, and each row's cells by the check's name."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = main(['check', bag, '--vehicle', vehicle])
    table = output.getvalue()
    rows = [re.split(r'\s{2,}', line.strip()) for line in table.splitlines()[1:] if line.strip()]
    return code, table, {row[0]: row[1:] for row in rows}


def wrong_rows(rows: Dict[str, List[str]]) -> List[str]:
    """Return the names of the checks judged wrong."""
    return [name for name, cells in rows.items() if cells and cells[0] == 'wrong']


def assert_layout_named(right: str, reversed_: str, vehicle: str, channel: str,
                        fix: str) -> None:
    """
    Assert check judges the layout ok on one recording and names the channel on the other.

    Only the layout row is judged (the tables are printed): the drives that make these
    recordings are short and quick, and the other checks are the real flights' business.
    """
    for bag, verdict in ((right, 'ok'), (reversed_, 'wrong')):
        code, table, rows = check_recording(bag, vehicle)
        print(f'\n{bag}:\n{table}')
        layout = rows[LAYOUT]
        assert layout[0] == verdict and channel in layout[1], table
        if verdict == 'wrong':
            assert code == 1 and 'reversed' in layout[1] and fix in layout[2], table
