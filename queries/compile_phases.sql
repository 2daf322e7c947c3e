-- purpose: every compilation of one run, placed in its phase: 'warmup' for the one-time first
--          compilation (the earliest compile, when it is not a recompile), for compiles paid by a
--          warm-up request (its name matches $warmup_name) and for compiles that start before the
--          first serving request arrives; 'steady' for recompiles while serving. Joined to the
--          request that paid for it (by compile_id on events, else by time) and its shape; a
--          compile no request paid for (ahead of serving) takes the shape_key its compile event
--          names in args, when it does.
-- parameters: $run_id (run id), $warmup_name (regular expression for warm-up request names)
-- columns: compile_id, start_us, duration_us, dynamo_us, aot_us, inductor_us, codegen_us,
--          recompile_reason, fail_reason, guard_count, graph_op_count, cache_hit, phase,
--          request_id, request_name_warmup, shape_key
WITH c AS (
    SELECT *, row_number() OVER (ORDER BY start_us, compile_id) AS seq
    FROM compiles
    WHERE run_id = $run_id
),
r AS (
    SELECT
        request_id, arrival_us, start_us, end_us, shape_key,
        coalesce(regexp_matches(name, $warmup_name), false) AS warm
    FROM requests
    WHERE run_id = $run_id
),
first_arrival AS (
    SELECT min(arrival_us) AS t0 FROM r WHERE NOT warm
),
by_event AS (
    SELECT compile_id, min(request_id) AS request_id
    FROM events
    WHERE run_id = $run_id AND compile_id IS NOT NULL AND request_id IS NOT NULL
    GROUP BY compile_id
),
by_args AS (
    SELECT compile_id, min(try(json_extract_string(args, '$.shape_key'))) AS shape_key
    FROM events
    WHERE run_id = $run_id AND compile_id IS NOT NULL AND args IS NOT NULL
    GROUP BY compile_id
),
by_time AS (
    SELECT c.compile_id, min(r.request_id) AS request_id
    FROM c
    JOIN r ON c.start_us >= r.start_us AND c.start_us < r.end_us
    GROUP BY c.compile_id
)
SELECT
    c.compile_id,
    c.start_us,
    c.duration_us,
    c.dynamo_us,
    c.aot_us,
    c.inductor_us,
    c.codegen_us,
    c.recompile_reason,
    c.fail_reason,
    c.guard_count,
    c.graph_op_count,
    c.cache_hit,
    CASE
        WHEN (c.seq = 1 AND c.recompile_reason IS NULL)
            OR c.start_us < (SELECT t0 FROM first_arrival)
            OR coalesce(r.warm, false) THEN 'warmup'
        ELSE 'steady'
    END AS phase,
    coalesce(by_event.request_id, by_time.request_id) AS request_id,
    coalesce(r.warm, false) AS request_name_warmup,
    coalesce(r.shape_key, by_args.shape_key) AS shape_key
FROM c
LEFT JOIN by_event USING (compile_id)
LEFT JOIN by_time USING (compile_id)
LEFT JOIN by_args USING (compile_id)
LEFT JOIN r ON r.request_id = coalesce(by_event.request_id, by_time.request_id)
ORDER BY c.start_us, c.compile_id
