-- purpose: shape distribution between two runs — requests per shape bucket (shape_key) in each
--          run and their shares, plus the failing run's latency in that bucket; the population
--          stability index is computed from these counts by accel.stats.psi.
-- parameters: $failing (run id), $comparator (run id)
-- columns: shape_key, n_failing, n_comparator, share_failing, share_comparator,
--          p95_failing_us, p95_comparator_us
WITH r AS (
    SELECT run_id, coalesce(shape_key, '') AS shape_key, latency_us
    FROM requests
    WHERE run_id IN ($failing, $comparator)
),
agg AS (
    SELECT
        shape_key,
        count(*) FILTER (WHERE run_id = $failing) AS n_failing,
        count(*) FILTER (WHERE run_id = $comparator) AS n_comparator,
        quantile_cont(latency_us, 0.95) FILTER (WHERE run_id = $failing) AS p95_failing_us,
        quantile_cont(latency_us, 0.95) FILTER (WHERE run_id = $comparator) AS p95_comparator_us
    FROM r
    GROUP BY shape_key
)
SELECT
    shape_key,
    n_failing,
    n_comparator,
    n_failing / greatest(sum(n_failing) OVER (), 1) AS share_failing,
    n_comparator / greatest(sum(n_comparator) OVER (), 1) AS share_comparator,
    p95_failing_us,
    p95_comparator_us
FROM agg
ORDER BY n_failing + n_comparator DESC, shape_key
