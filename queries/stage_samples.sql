-- purpose: per-request end-to-end latency and exclusive stage times of two runs, the samples
--          behind stage_quantiles, for bootstrap intervals and rank tests.
-- parameters: $failing (run id), $comparator (run id)
-- columns: role ('failing'|'comparator'), request_id, arrival_us, start_us, batch_id, latency_us, ingress_us,
--          lowering_us, scheduling_us, execution_us, assembly_us, other_us
SELECT
    CASE WHEN run_id = $failing THEN 'failing' ELSE 'comparator' END AS role,
    request_id,
    arrival_us,
    start_us,
    batch_id,
    latency_us,
    ingress_us,
    lowering_us,
    scheduling_us,
    execution_us,
    assembly_us,
    other_us
FROM requests
WHERE run_id IN ($failing, $comparator)
ORDER BY role, arrival_us, request_id
