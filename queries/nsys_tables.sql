-- purpose: the tables of an SQLite file, to tell an Nsight Systems export (StringIds beside
--          CUPTI_ACTIVITY_KIND_* / NVTX_EVENTS tables) from any other SQLite database.
-- parameters: none
-- columns: name
SELECT name
FROM sqlite_master
WHERE type = 'table'
