-- purpose: kernel executions of an Nsight Systems export, one share of the rows (the importer
--          reads the shares on parallel threads), with the launch configuration as Kineto-style
--          args JSON. A globalPid packs the process id in bits 24..47.
-- parameters: $parts (number of shares), $part (this share, 0 .. $parts - 1)
-- columns: start, end (ns since session start), device, stream, correlation (the launch call's
--          correlationId within its process), process (launching process id), name_id
--          (StringIds id: demangled name, else short name), args (JSON text)
SELECT
    start,
    "end",
    deviceId AS device,
    streamId AS stream,
    CAST(correlationId AS INTEGER) AS correlation,
    (CAST(globalPid AS INTEGER) >> 24) & 16777215 AS process,
    COALESCE(demangledName, shortName) AS name_id,
    printf(
        '{"grid": [%d, %d, %d], "block": [%d, %d, %d], "registers per thread": %d, '
        || '"shared memory": %d}',
        gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, staticSharedMemory
    ) AS args
FROM CUPTI_ACTIVITY_KIND_KERNEL
WHERE rowid % $parts = $part
