"""One run from many trace files, and the engine seam that maps per-file work over local processes
or a Dask cluster. Imports the store and the importers; the importers never import it."""
