-- purpose: tail first — p50/p95/p99 of end-to-end latency and of each stage's exclusive time,
--          failing vs comparator, with the number of requests behind each figure. Quantiles are
--          linear interpolation (quantile_cont), the same definition as accel.stats.quantile.
-- parameters: $failing (run id), $comparator (run id), $skip_failing, $skip_comparator (request
--             ids of each run to leave out, e.g. its warm-up requests; [] for none)
-- columns: stage ('latency' for end-to-end, then the five stages and 'other'), role
--          ('failing'|'comparator'), run_id, n, p50_us, p95_us, p99_us, mean_us
WITH r AS (
    SELECT
        CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
        *
    FROM requests
    WHERE run_id IN ($failing, $comparator)
      AND NOT list_contains(
          CASE WHEN run_id = $failing THEN $skip_failing ELSE $skip_comparator END, request_id
      )
),
long AS (
    UNPIVOT r
    ON latency_us AS 'latency', ingress_us AS 'ingress', lowering_us AS 'lowering',
       scheduling_us AS 'scheduling', execution_us AS 'execution', assembly_us AS 'assembly',
       other_us AS 'other'
    INTO NAME stage VALUE us
)
SELECT
    stage,
    role,
    any_value(run_id) AS run_id,
    count(us) AS n,
    quantile_cont(us, 0.50) AS p50_us,
    quantile_cont(us, 0.95) AS p95_us,
    quantile_cont(us, 0.99) AS p99_us,
    avg(us) AS mean_us
FROM long
GROUP BY stage, role
ORDER BY
    list_position(
        ['latency', 'ingress', 'lowering', 'scheduling', 'execution', 'assembly', 'other'], stage
    ),
    role DESC
