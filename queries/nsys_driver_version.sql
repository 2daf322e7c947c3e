-- purpose: the NVIDIA driver version the export states (NvDriverVersion, e.g. 52510517).
-- parameters: none
-- columns: value
SELECT value
FROM TARGET_INFO_SYSTEM_ENV
WHERE name = 'NvDriverVersion'
LIMIT 1
