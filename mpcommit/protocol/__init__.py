"""The commit protocol, engine-neutral: where files go (layout), how a task attempt streams them as multipart
uploads and records them (writer, task, records/), how the driver commits, aborts or recovers a job (job,
commit, recovery), which jobs a destination holds and in what state (inventory), and the named checkpoints
where tests inject failures (faults)."""
