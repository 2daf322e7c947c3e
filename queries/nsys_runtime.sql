-- purpose: CUDA runtime and driver API calls of an Nsight Systems export on their host
--          threads, one share of the rows. A globalTid packs the process id in bits 24..47 and
--          the thread id in bits 0..23.
-- parameters: $parts (number of shares), $part (this share, 0 .. $parts - 1)
-- columns: start, end (ns since session start), pid, tid, correlation (links the call to what
--          it launched, within its process), name_id (StringIds id)
SELECT
    start,
    "end",
    (CAST(globalTid AS INTEGER) >> 24) & 16777215 AS pid,
    CAST(globalTid AS INTEGER) & 16777215 AS tid,
    CAST(correlationId AS INTEGER) AS correlation,
    nameId AS name_id
FROM CUPTI_ACTIVITY_KIND_RUNTIME
WHERE rowid % $parts = $part
