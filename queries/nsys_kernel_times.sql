-- purpose: the bare read of an Nsight Systems export's kernel rows (start and end only, one
--          share): the baseline bench/ingest_nsys.py sets the importer's speed against.
-- parameters: none
-- columns: start, end (ns since session start)
SELECT
    start,
    "end"
FROM CUPTI_ACTIVITY_KIND_KERNEL
