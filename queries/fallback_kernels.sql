-- purpose: kernels that fell back to a generic or eager path in one run, by kernel and input
--          shape: how often, for how long, and the non-fallback time of the same op name on the
--          same shape where the run has it (what pinning the tuned kernel would give back).
-- parameters: $run_id (run id)
-- columns: kernel, name, shape, n, total_us, p95_us, tuned_median_us, excess_us
WITH ev AS (
    SELECT name, kernel, shape, dur_us, coalesce(fallback, false) AS fallback
    FROM events
    WHERE run_id = $run_id AND request_id IS NOT NULL AND stage IS NOT NULL
),
fb AS (
    SELECT coalesce(kernel, name) AS kernel, name, shape, count(*) AS n,
           sum(dur_us) AS total_us, quantile_cont(dur_us, 0.95) AS p95_us
    FROM ev
    WHERE fallback
    GROUP BY ALL
),
tuned AS (
    SELECT shape, median(dur_us) AS tuned_median_us
    FROM ev
    WHERE NOT fallback
    GROUP BY shape
)
SELECT
    fb.*,
    tuned.tuned_median_us,
    greatest(fb.total_us - fb.n * coalesce(tuned.tuned_median_us, fb.total_us / fb.n), 0)
        AS excess_us
FROM fb
LEFT JOIN tuned USING (shape)
ORDER BY excess_us DESC, total_us DESC
