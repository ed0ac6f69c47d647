"""The server's per-node table grows while writers hold references into it."""

from __future__ import annotations

import numpy as np

from suggestion_server.node_table import COLUMNS, NodeTable


def test_metrics_and_usage_for_more_nodes_than_the_table_holds():
    table = NodeTable(capacity=2)
    names = [f"n{i}" for i in range(600)]
    table.replace_usage({n: (float(i), 2.0 * i, 1.0) for i, n in enumerate(names)})
    table.replace_metrics({n: {"cpu_utilization": i / 1000, "latency_ms": 5.0} for i, n in enumerate(names[::-1])})
    table.replace_metrics({f"m{i}": {"cpu_utilization": 0.5} for i in range(300)})  # new rows during a refresh
    with table.reading() as data:  # as a request reads it: a row per column, a column per node
        rows = table.rows(names + ["m299", "never-reported"])
        got = {key: data[i, rows] for i, key in enumerate(COLUMNS)}
    assert np.array_equal(got["cpu_requested"][:600], np.arange(600.0))
    assert np.array_equal(got["memory_requested"][:600], 2.0 * np.arange(600))
    assert np.isnan(got["cpu_utilization"][:600]).all()  # the last refresh did not mention them
    assert got["cpu_utilization"][600] == 0.5
    assert np.isnan(got["cpu_utilization"][601]) and np.isnan(got["cpu_capacity"][601])
    assert len(table) == 900
