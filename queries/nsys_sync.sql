-- purpose: synchronisations (event, stream, context waits) of an Nsight Systems export, one
--          share of the rows.
-- parameters: $parts (number of shares), $part (this share, 0 .. $parts - 1)
-- columns: start, end (ns since session start), device, stream, correlation, process (as in
--          nsys_kernels.sql), kind (CUPTI_ActivitySynchronizationType)
SELECT
    start,
    "end",
    deviceId AS device,
    streamId AS stream,
    CAST(correlationId AS INTEGER) AS correlation,
    (CAST(globalPid AS INTEGER) >> 24) & 16777215 AS process,
    syncType AS kind
FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
WHERE rowid % $parts = $part
