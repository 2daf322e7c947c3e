-- purpose: what broke the compiled graphs of one run, for the proof of a graph_break verdict:
--          the operators that ran eagerly between compiled graphs (see graph_break_requests.sql)
--          with how many requests ran them, and the compile log's graph-break reasons
--          (compiles.graph_break_reasons: JSON list of {file, line, reason, hint, code}) with
--          how many compilations logged them.
-- parameters: $run_id
-- columns: source ('trace' | 'compile_log'), what (op name, or the reason JSON object),
--          n (requests running the op, or compilations logging the reason), per_request (ops
--          per request that ran it; null for the log)
WITH ev AS (
    SELECT event_id, request_id, name, parent_id
    FROM events
    WHERE run_id = $run_id AND request_id IS NOT NULL
),
eager AS (
    SELECT e.request_id, e.name
    FROM ev AS e
    JOIN ev AS p ON p.event_id = e.parent_id
    WHERE starts_with(p.name, 'Torch-Compiled Region: ') AND starts_with(e.name, 'aten::')
),
ops AS (
    SELECT
        'trace' AS source,
        name AS what,
        count(DISTINCT request_id) AS n,
        count(*) / count(DISTINCT request_id) AS per_request
    FROM eager
    GROUP BY name
),
reasons AS (
    SELECT
        'compile_log' AS source,
        CAST(unnest(CAST(graph_break_reasons AS JSON[])) AS VARCHAR) AS what
    FROM compiles
    WHERE run_id = $run_id AND graph_breaks > 0
)
SELECT source, what, n, per_request
FROM ops
UNION ALL
SELECT source, what, count(*) AS n, NULL AS per_request
FROM reasons
GROUP BY source, what
ORDER BY source DESC, n DESC, what
