#!/bin/bash
# Slurm's jobcomp/script (JobCompType=jobcomp/script, JobCompLoc=this file): append the finished job to the
# spool that `tsched-slurm-jobcomp --follow SPOOL` reports to the predictor. A few milliseconds, whatever the
# predictor's state: slurmctld runs these one after the other. Edit SPOOL; slurmctld's user must write it.
#
# The job is read from the environment slurmctld gave (/proc/$$/environ: bash replaces UID with its own),
# one NUL-terminated KEY=VALUE record at a time, so a newline in a field a user controls (the job's name,
# its working directory) can never start a record of its own. Only the fields below are written, each
# checked against what Slurm can put in it; a value that does not match, or a field given twice, writes
# the line with REJECTED=KEY and the follower refuses it. The job's name (JOBNAME, which any user chooses) is
# written only when it is a plain name, as job_submit.lua sends it; any other is left out (the job then goes
# with no application). The line starts with the format's version (v2).
SPOOL=/var/spool/tsched/completions

declare -A PATTERN=(
    [JOBID]='^[0-9]{1,12}$' [UID]='^[0-9]{1,10}$' [GID]='^[0-9]{1,10}$'
    [SUBMIT]='^[0-9]{1,12}$' [START]='^[0-9]{1,12}$' [END]='^[0-9]{1,12}$' [PROCS]='^[0-9]{1,9}$'
    [NODECNT]='^[0-9]{1,9}$'
    [LIMIT]='^([0-9]{1,6}-)?[0-9]{1,6}:[0-9]{2}:[0-9]{2}$|^[A-Za-z_]{1,32}$'
    [JOBSTATE]='^[A-Z_]{1,32}$'
    [USERNAME]='^[A-Za-z0-9._@-]{1,64}$' [ACCOUNT]='^[A-Za-z0-9._@-]{1,64}$'
    [PARTITION]='^[A-Za-z0-9._,-]{1,128}$' [QOS]='^[A-Za-z0-9._-]{1,64}$'
)
declare -A OPTIONAL=([JOBNAME]='^[A-Za-z0-9._@-]{1,128}$')
declare -A seen=()
fields=() rejected=()
while IFS= read -r -d '' record; do
    key=${record%%=*}
    value=${record#*=}
    if [ -n "${OPTIONAL[$key]+set}" ]; then
        if [ -z "${seen[$key]+set}" ] && [[ $value =~ ${OPTIONAL[$key]} ]]; then
            fields+=("$key=$value")
        fi
        seen[$key]=1
        continue
    fi
    [ -n "${PATTERN[$key]+set}" ] || continue
    if [ -n "${seen[$key]+set}" ] || ! [[ $value =~ ${PATTERN[$key]} ]]; then
        rejected+=("$key")
        continue
    fi
    seen[$key]=1
    fields+=("$key=$value")
done </proc/$$/environ
if [ ${#rejected[@]} -gt 0 ]; then
    fields+=("REJECTED=$(IFS=,; echo "${rejected[*]}")")
fi
echo "v2 ${fields[*]}" >>"$SPOOL"
