"""torch.compile structured logs (TORCH_TRACE), a run's companion file: the compiles table and what
each compilation says (graph breaks, guards). Imports the store schema and the seam; never another importer."""
