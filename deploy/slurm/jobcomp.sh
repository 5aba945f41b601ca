#!/bin/sh
# Slurm's jobcomp/script (JobCompType=jobcomp/script, JobCompLoc=this file): append the finished job to the
# spool that `tsched-slurm-jobcomp --follow SPOOL` reports to the predictor. Microseconds, whatever the
# predictor's state: slurmctld runs these one after the other. Edit SPOOL; slurmctld's user must write it.
# The job is read from the environment slurmctld gave (/proc/$$/environ): bash replaces UID with its own.
SPOOL=/var/spool/tsched/completions
line=$(tr '\0' '\n' </proc/$$/environ | grep -E '^(JOBID|UID|GID|SUBMIT|START|END|LIMIT|PROCS|JOBSTATE)=' | tr '\n' ' ')
echo "$line" >>"$SPOOL"
