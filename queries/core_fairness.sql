-- purpose: core / stream fairness — busy time per (device, core, stream) and its share of the
--          run's busy time, with Jain's fairness index over cores per run (1 = perfectly even).
-- parameters: $failing (run id), $comparator (run id)
-- columns: role, run_id, device, core, stream, n_ops, busy_us, busy_share, p99_op_us,
--          jain_index (per run, repeated on its rows), max_over_mean (per run)
WITH ev AS (
    SELECT
        CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
        run_id, device, core, stream, dur_us
    FROM events
    WHERE run_id IN ($failing, $comparator) AND core IS NOT NULL
),
cells AS (
    SELECT
        role, run_id, device, core, stream,
        count(*) AS n_ops,
        sum(dur_us) AS busy_us,
        quantile_cont(dur_us, 0.99) AS p99_op_us
    FROM ev
    GROUP BY ALL
),
cores AS (
    SELECT run_id, device, core, sum(busy_us) AS busy
    FROM cells
    GROUP BY ALL
),
fair AS (
    SELECT
        run_id,
        sum(busy) * sum(busy) / (count(*) * sum(busy * busy)) AS jain_index,
        max(busy) / avg(busy) AS max_over_mean
    FROM cores
    GROUP BY run_id
)
SELECT
    c.role, c.run_id, c.device, c.core, c.stream, c.n_ops, c.busy_us,
    c.busy_us / sum(c.busy_us) OVER (PARTITION BY c.run_id) AS busy_share,
    c.p99_op_us,
    f.jain_index,
    f.max_over_mean
FROM cells c
JOIN fair f USING (run_id)
ORDER BY c.role DESC, c.device, c.core, c.stream
