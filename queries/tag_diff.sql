-- purpose: tag differences between runs — every run metadata field and free-form tag of the
--          failing run next to each other run's value. `locked` marks the fields a comparison
--          must hold equal (given as a parameter, so the lock list lives in one place).
-- parameters: $failing (run id), $others (list of run ids), $locked (list of field names)
-- columns: run_id, key, failing_value, other_value, locked, differs
WITH meta AS (
    SELECT
        run_id,
        [
            {'key': 'model', 'value': model},
            {'key': 'workload', 'value': workload},
            {'key': 'compiler', 'value': compiler},
            {'key': 'compiler_version', 'value': compiler_version},
            {'key': 'runtime', 'value': runtime},
            {'key': 'runtime_version', 'value': runtime_version},
            {'key': 'hardware', 'value': hardware},
            {'key': 'device_count', 'value': CAST(device_count AS VARCHAR)},
            {'key': 'driver_version', 'value': driver_version},
            {'key': 'host', 'value': host},
            {'key': 'world_size', 'value': CAST(world_size AS VARCHAR)},
            {'key': 'thermal_state', 'value': thermal_state}
        ]
        || coalesce(
            list_transform(
                map_entries(tags), lambda e: {'key': 'tag:' || e.key, 'value': e.value}
            ),
            []
        ) AS kv
    FROM runs
    WHERE run_id = $failing OR list_contains($others, run_id)
),
long AS (
    SELECT run_id, unnest(kv, recursive := true)
    FROM meta
),
f AS (SELECT key, value FROM long WHERE run_id = $failing),
o AS (SELECT run_id, key, value FROM long WHERE list_contains($others, run_id)),
keys AS (
    SELECT o.run_id, k.key FROM (SELECT DISTINCT run_id FROM o) o
    CROSS JOIN (SELECT key FROM f UNION SELECT key FROM o) k
)
SELECT
    keys.run_id,
    keys.key,
    f.value AS failing_value,
    o.value AS other_value,
    list_contains($locked, keys.key) AS locked,
    f.value IS DISTINCT FROM o.value AS differs
FROM keys
LEFT JOIN f ON f.key = keys.key
LEFT JOIN o ON o.run_id = keys.run_id AND o.key = keys.key
ORDER BY keys.run_id, locked DESC, differs DESC, keys.key
