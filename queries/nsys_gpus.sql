-- purpose: the GPUs the export ran on (one row per device id), for the runs row's hardware and
--          device columns.
-- parameters: none
-- columns: id, name, sm_count, memory_bandwidth (bytes/s), total_memory (bytes), l2_bytes
SELECT DISTINCT
    id,
    name,
    smCount AS sm_count,
    memoryBandwidth AS memory_bandwidth,
    totalMemory AS total_memory,
    l2CacheSize AS l2_bytes
FROM TARGET_INFO_GPU
ORDER BY id
