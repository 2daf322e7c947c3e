-- purpose: the requests of one run in arrival order, as the accelerator model's RequestArrays.
-- parameters: $run_id (run id), $skip_requests (request ids to leave out, e.g. warm-up; [] none)
-- columns: request_id, arrival_us, start_us, latency_us, ingress_us, lowering_us, scheduling_us,
--          execution_us, assembly_us, other_us, batch_size, batch_id, shape_key
SELECT
    request_id,
    arrival_us,
    start_us,
    latency_us,
    ingress_us,
    lowering_us,
    scheduling_us,
    execution_us,
    assembly_us,
    other_us,
    batch_size,
    batch_id,
    shape_key
FROM requests
WHERE run_id = $run_id AND NOT list_contains($skip_requests, request_id)
ORDER BY arrival_us, request_id
