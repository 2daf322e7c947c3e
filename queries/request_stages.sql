-- purpose: one request of a run with its latency and exclusive stage times, and where its
--          latency ranks among the run's requests (cume_dist: the quantile the app's drill-down
--          picks it at); ties of request id go to the earliest arrival.
-- parameters: $run_id (run id), $request_id (request id)
-- columns: request_id, shape_key, batch_id, batch_size, arrival_us, latency_us, ingress_us,
--          lowering_us, scheduling_us, execution_us, assembly_us, other_us, quantile,
--          n_requests (the requests the quantile ranks it among)
WITH r AS (
    SELECT
        request_id,
        shape_key,
        batch_id,
        batch_size,
        arrival_us,
        latency_us,
        ingress_us,
        lowering_us,
        scheduling_us,
        execution_us,
        assembly_us,
        other_us,
        cume_dist() OVER (ORDER BY latency_us NULLS LAST) AS quantile,
        count(*) OVER () AS n_requests
    FROM requests
    WHERE run_id = $run_id
)
SELECT *
FROM r
WHERE request_id = $request_id
ORDER BY arrival_us
LIMIT 1
