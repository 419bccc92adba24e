"""Studies as Ray Jobs on a cluster: the job-server client (``client``), what a job gets
(``env``), turning a study file into a submission (``submit``), the job's driver (``entry``) and
the ``harness submit`` / ``harness jobs`` commands (``commands``)."""
