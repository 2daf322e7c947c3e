-- purpose: graph-break evidence from the trace alone, per request of one run: how many
--          torch.compile regions it entered (a region is a span 'Torch-Compiled Region: <id>';
--          a graph break splits one call into a region per resumed frame, nested) and how many
--          operators ran eagerly between its compiled graphs (an aten op whose enclosing span
--          is a region itself, not a '## Call CompiledFxGraph' inside it: the code at a break).
-- parameters: $run_id
-- columns: request_id, regions, eager_ops
-- Each name filter stands alone in its own scan: duckdb prunes on the name column before it
-- reads the other columns, where one scan of every attributed event reads them all.
WITH region AS (
    SELECT event_id, request_id
    FROM events
    WHERE run_id = $run_id
        AND starts_with(name, 'Torch-Compiled Region: ')
        AND request_id IS NOT NULL
),
eager AS (
    SELECT e.request_id
    FROM events AS e
    JOIN region AS r ON r.event_id = e.parent_id
    WHERE e.run_id = $run_id
        AND starts_with(e.name, 'aten::')
        AND e.request_id IS NOT NULL
)
SELECT
    q.request_id,
    (SELECT count(*) FROM region AS r WHERE r.request_id = q.request_id) AS regions,
    (SELECT count(*) FROM eager AS g WHERE g.request_id = q.request_id) AS eager_ops
FROM requests AS q
WHERE q.run_id = $run_id
ORDER BY q.request_id
