"""Jobs: theorem runs and the command-line jobs built on the engine, one registry that declares each job's options
(docs/jobs.md). Imports only from the layers below (tasks, dynamics, analysis, plot, io)."""
