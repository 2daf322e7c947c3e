"""The Chrome-trace / PyTorch profiler (Kineto) JSON format: the streamed reader, the args decoded
on a second process, the Importer. Imports the store, columns/ and attribution/; never another importer."""
