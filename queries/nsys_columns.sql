-- purpose: the columns of one table of an Nsight Systems export, to check that it has those
--          the importer reads (an export of an unknown schema gets a one-line error instead).
-- parameters: $table (table name)
-- columns: name
SELECT name
FROM pragma_table_info($table)
