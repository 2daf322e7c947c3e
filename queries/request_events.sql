-- purpose: every trace event of one request, in time order: the drill-down timeline's bars.
--          Reads only that request's rows (the run's partition, filtered on request_id).
-- parameters: $run_id (run id), $request_id (request id)
-- columns: event_id, stage, category, name, ts_us, dur_us, device, core, stream, shape, kernel,
--          tile, fusion_group, mem_tier, fallback, recompile, args
SELECT
    event_id,
    stage,
    category,
    name,
    ts_us,
    dur_us,
    device,
    core,
    stream,
    shape,
    kernel,
    tile,
    fusion_group,
    mem_tier,
    fallback,
    recompile,
    args
FROM events
WHERE run_id = $run_id AND request_id = $request_id
ORDER BY ts_us, event_id
