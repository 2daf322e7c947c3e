"""The bundled sample store's writer (`workbench sample`): store tables from accel.synth runs.
Imports accel and workbench.store; nothing above them."""
