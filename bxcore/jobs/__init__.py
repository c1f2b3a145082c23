"""Scheduled jobs (SPEC §19): a job and its timing (`job`), the job files of `{home}/jobs/`
(`files`), when a job is due (`schedule`), and what a job's view says (`view`)."""
