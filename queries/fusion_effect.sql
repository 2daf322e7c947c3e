-- purpose: operator fusion effect per run — launches saved by fusion (ops that ran inside a
--          fusion group beyond one launch per group) against the bytes those groups moved, and
--          the largest per-instance working set of a fusion group (sum of its ops' bytes within
--          one request), to set against on-chip capacity.
-- parameters: $failing (run id), $comparator (run id)
-- columns: role, run_id, n_ops, fused_ops, fusion_groups, launches, launches_saved,
--          fused_bytes, unfused_bytes, fused_us, unfused_us, p95_group_working_set_bytes,
--          max_group_working_set_bytes
WITH ev AS (
    SELECT
        CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
        run_id, request_id, fusion_group, bytes, dur_us
    FROM events
    WHERE run_id IN ($failing, $comparator) AND request_id IS NOT NULL AND stage IS NOT NULL
),
groups AS (
    SELECT role, run_id, request_id, fusion_group, count(*) AS ops,
           sum(coalesce(bytes, 0)) AS ws
    FROM ev
    WHERE fusion_group IS NOT NULL AND fusion_group >= 0
    GROUP BY ALL
),
g AS (
    SELECT role, run_id, count(*) AS instances, CAST(sum(ops) AS BIGINT) AS fused_ops,
           quantile_cont(ws, 0.95) AS p95_ws, max(ws) AS max_ws
    FROM groups
    GROUP BY ALL
),
totals AS (
    SELECT
        role, run_id,
        count(*) AS n_ops,
        sum(CASE WHEN fusion_group >= 0 THEN coalesce(bytes, 0) ELSE 0 END) AS fused_bytes,
        sum(CASE WHEN fusion_group >= 0 THEN 0 ELSE coalesce(bytes, 0) END) AS unfused_bytes,
        sum(CASE WHEN fusion_group >= 0 THEN dur_us ELSE 0 END) AS fused_us,
        sum(CASE WHEN fusion_group >= 0 THEN 0 ELSE dur_us END) AS unfused_us
    FROM ev
    GROUP BY ALL
)
SELECT
    t.role, t.run_id, t.n_ops,
    coalesce(g.fused_ops, 0) AS fused_ops,
    coalesce(g.instances, 0) AS fusion_groups,
    t.n_ops - coalesce(g.fused_ops, 0) + coalesce(g.instances, 0) AS launches,
    coalesce(g.fused_ops, 0) - coalesce(g.instances, 0) AS launches_saved,
    t.fused_bytes, t.unfused_bytes, t.fused_us, t.unfused_us,
    g.p95_ws AS p95_group_working_set_bytes,
    g.max_ws AS max_group_working_set_bytes
FROM totals t
LEFT JOIN g USING (role, run_id)
ORDER BY t.role DESC
