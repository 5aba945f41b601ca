--[[
job_submit.lua: at each submission, ask the tsched predictor for the job's t_sched and write it on the
job's admin comment (`scontrol show job` and `sacct -o AdminComment` show it). The job is asked about
as the site's history is keyed: its user and account by name, its submit time in Unix seconds; with set_time_min=yes in
tsched.conf, also set the job's time_min to it (Slurm may then shorten the job's limit down to it when
that lets the job backfill: only for a site that accepts that).

A submission is never refused or held up because of the predictor: the question has a deadline
(deadline_ms in tsched.conf, default 100 ms), and without an answer the job goes in as submitted, with a
line in slurmctld's log. Install: copy this file, tsched_client.lua and tsched.conf beside slurm.conf,
and set JobSubmitPlugins=lua. deploy/slurm/README.md has the rest.
--]]

local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
local tsched = dofile(here .. "tsched_client.lua")
local config = tsched.read_config(here .. "tsched.conf")

-- Slurm's "not set" values for 32- and 16-bit fields (NO_VAL, INFINITE, NO_VAL16).
local UNSET32, UNSET16 = 4294967294, 65534

local function set(value, unset)
    return value ~= nil and value < unset
end

-- The partition the job runs in, as sacct and jobcomp name it: the first it asks for, else the default
-- partition (the one of part_list, the partitions the user may use, flagged default).
local function partition_of(job_desc, part_list)
    if job_desc.partition ~= nil and job_desc.partition ~= "" then
        return job_desc.partition:match("^[^,]+")
    end
    for name, partition in pairs(part_list or {}) do
        if partition.flag_default == 1 then
            return name
        end
    end
    return nil
end

-- The memory the job asks for in all, MB (as sacct's ReqTRES mem=): per node times nodes, or per CPU
-- times CPUs (--mem=0, all of each node's, is 0); without either, its partition's DefMemPerNode or
-- DefMemPerCPU, which slurmctld gives it and sacct records (slurm.conf's cluster-wide default is not
-- visible here: 0 then).
local function memory_of(job_desc, partition, nodes, procs)
    if job_desc.min_mem_per_node ~= nil then
        return job_desc.min_mem_per_node * nodes
    elseif job_desc.min_mem_per_cpu ~= nil then
        return job_desc.min_mem_per_cpu * procs
    elseif partition ~= nil and partition.def_mem_per_node ~= nil then
        return partition.def_mem_per_node * nodes
    elseif partition ~= nil and partition.def_mem_per_cpu ~= nil then
        return partition.def_mem_per_cpu * procs
    end
    return 0
end

-- GPUs the job asks for in all (as ReqTRES gres/gpu=): --gpus (tres_per_job), else --gres=gpu or
-- --gpus-per-node (tres_per_node) times nodes; "gres:gpu:2" and "gres:gpu:a100:2" alike.
local function gpu_count(tres)
    if type(tres) ~= "string" then
        return nil
    end
    local count = tres:match("gpu:(%d+)") or tres:match("gpu:[^:,]+:(%d+)")
    return count and tonumber(count) or nil
end

local function gpus_of(job_desc, nodes)
    local per_job = gpu_count(job_desc.tres_per_job)
    if per_job ~= nil then
        return per_job
    end
    local per_node = gpu_count(job_desc.tres_per_node)
    return per_node and per_node * nodes or 0
end

-- The job as the predictor knows it, or nil and why it cannot be asked about.
local function job_from(job_desc, part_list)
    if not set(job_desc.time_limit, UNSET32) or job_desc.time_limit == 0 then
        return nil, "no time limit given"
    end
    local procs = 1
    if set(job_desc.min_cpus, UNSET32) and job_desc.min_cpus > 0 then
        procs = job_desc.min_cpus
    elseif set(job_desc.num_tasks, UNSET32) and job_desc.num_tasks > 0 then
        local per_task = 1
        if set(job_desc.cpus_per_task, UNSET16) and job_desc.cpus_per_task > 0 then
            per_task = job_desc.cpus_per_task
        end
        procs = job_desc.num_tasks * per_task
    end
    -- The account the job will be charged: the one asked for, else the user's default (Slurm keeps account
    -- names in lower case); sacct, jobcomp.sh and the follower key the job by the same names.
    local account = job_desc.account
    if account == nil or account == "" then
        account = job_desc.default_account
    end
    local nodes = set(job_desc.min_nodes, UNSET32) and job_desc.min_nodes or 0
    local partition = partition_of(job_desc, part_list)
    return {
        submit = os.time(),
        user = job_desc.user_id,
        user_name = job_desc.user_name,
        group = job_desc.group_id,
        account = account and string.lower(account) or nil,
        t_req = job_desc.time_limit * 60,
        procs = procs,
        partition = partition,
        qos = job_desc.qos or job_desc.default_qos,
        job_name = job_desc.name,
        nodes = nodes,
        memory_mb = memory_of(job_desc, partition and (part_list or {})[partition], math.max(nodes, 1), procs),
        gpus = gpus_of(job_desc, math.max(nodes, 1)),
        exclusive = job_desc.shared == 0,
    }
end

local function annotate(job_desc, part_list, submit_uid)
    local job, why = job_from(job_desc, part_list)
    if job == nil then
        slurm.log_info("tsched: a job of uid %u is not predicted: %s", submit_uid, why)
        return
    end
    local answer, reason = tsched.predict(config, job)
    if answer == nil then
        slurm.log_info("tsched: no prediction for a job of uid %u, submitted without one: %s", submit_uid, reason)
        return
    end
    local comment = tsched.comment(answer)
    if job_desc.admin_comment ~= nil and job_desc.admin_comment ~= "" then
        comment = job_desc.admin_comment .. " " .. comment
    end
    job_desc.admin_comment = comment
    if config.set_time_min == "yes" and not answer.fallback then
        job_desc.time_min = math.ceil(answer.t_sched / 60)
    end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, error = pcall(annotate, job_desc, part_list, submit_uid)
    if not ok then
        slurm.log_error("tsched: job_submit.lua failed, the job is submitted unchanged: %s", tostring(error))
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

slurm.log_info("tsched: job_submit.lua asks %s (deadline %s ms)", config.address, config.deadline_ms)
return slurm.SUCCESS
