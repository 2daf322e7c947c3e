-- purpose: the attributed ops of one run for the accelerator model (OpArrays): every event with
--          a request and one of the five stages, with its exclusive time (its duration minus its
--          direct children's, so nested events are never counted twice). Text columns come back
--          as 0-based positions in the given lists (-1 when null or not listed). Rows come in no
--          particular order (sorting 10M rows here costs more than sorting event_id in numpy).
--          Leaving requests out happens in numpy too: a filter on `req` makes duckdb pick a plan
--          that is twice as slow.
-- parameters: $run_id (run id), $stages (stage ids, pipeline order), $tiers (memory tier ids),
--             $shapes, $tiles, $kernels, $names (lists of distinct values, from run_op_values)
-- columns: event_id, req (request index in run_requests order), stage, observed_us, flops, bytes,
--          shape_id, tile_id, fusion_group, mem_tier, core, fallback, recompile, predicted_us,
--          kernel_id, name_id
WITH req AS (
    SELECT request_id, row_number() OVER (ORDER BY arrival_us, request_id) - 1 AS req
    FROM requests
    WHERE run_id = $run_id
),
child AS (
    SELECT parent_id, sum(dur_us) AS child_us
    FROM events
    WHERE run_id = $run_id AND parent_id IS NOT NULL
    GROUP BY parent_id
),
shapes AS (
    SELECT unnest($shapes) AS shape, generate_subscripts($shapes, 1) - 1 AS shape_id
),
tiles AS (
    SELECT unnest($tiles) AS tile, generate_subscripts($tiles, 1) - 1 AS tile_id
),
kernels AS (
    SELECT unnest($kernels) AS kernel, generate_subscripts($kernels, 1) - 1 AS kernel_id
),
names AS (
    SELECT unnest($names) AS name, generate_subscripts($names, 1) - 1 AS name_id
)
SELECT
    ev.event_id,
    req.req,
    CAST(list_position($stages, ev.stage) - 1 AS TINYINT) AS stage,
    greatest(ev.dur_us - coalesce(child.child_us, 0.0), 0.0) AS observed_us,
    ev.flops,
    ev.bytes,
    CAST(coalesce(shapes.shape_id, -1) AS INTEGER) AS shape_id,
    CAST(coalesce(tiles.tile_id, -1) AS INTEGER) AS tile_id,
    coalesce(ev.fusion_group, -1) AS fusion_group,
    CAST(coalesce(list_position($tiers, ev.mem_tier), 0) - 1 AS TINYINT) AS mem_tier,
    coalesce(ev.core, -1) AS core,
    coalesce(ev.fallback, false) AS fallback,
    coalesce(ev.recompile, false) AS recompile,
    ev.predicted_us,
    CAST(coalesce(kernels.kernel_id, -1) AS INTEGER) AS kernel_id,
    CAST(coalesce(names.name_id, -1) AS INTEGER) AS name_id
FROM events ev
JOIN req ON req.request_id = ev.request_id
LEFT JOIN child ON child.parent_id = ev.event_id
LEFT JOIN shapes ON shapes.shape = ev.shape
LEFT JOIN tiles ON tiles.tile = ev.tile
LEFT JOIN kernels ON kernels.kernel = ev.kernel
LEFT JOIN names ON names.name = ev.name
WHERE ev.run_id = $run_id AND list_contains($stages, ev.stage)
