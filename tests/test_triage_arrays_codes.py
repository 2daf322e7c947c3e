"""workbench.store.arrays fills OpArrays.name_code / name_vocab in step with OpArrays.name."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accel.ops import name_codes
from triage_stores import RunSpec, write_run
from workbench.store import arrays, db


def test_name_codes_match_names_when_loaded_and_dropped(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("s", n_requests=30, drift_share=0.3, recompile_us=3000.0))
    con = db.connect(tmp_path)
    full = arrays.load_run_arrays(con, "s")
    skipped = arrays.load_run_arrays(con, "s", skip_requests=["r0", "r7"])
    dropped = arrays.drop_requests(full, ["r0", "r7"])
    for run in (full, skipped, dropped):
        ops = run.ops
        assert ops.name_code.dtype == np.int32 and ops.name_code.size == ops.size
        assert [ops.name_vocab[c] for c in ops.name_code] == ops.name
        codes, vocab = name_codes(ops)
        assert [vocab[c] for c in codes] == ops.name and vocab == sorted(set(ops.name))
    assert np.array_equal(skipped.ops.name_code, dropped.ops.name_code)
