-- purpose: the export's interned strings (kernel, API call and NVTX names are StringIds ids).
-- parameters: none
-- columns: id, value
SELECT id, value
FROM StringIds
ORDER BY id
