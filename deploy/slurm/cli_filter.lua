--[[
cli_filter.lua: advisory only. Before sbatch or salloc submits, ask the tsched predictor how long jobs
like this one run, and tell the user (on stderr) when the request is much longer than that: shorter
requests backfill sooner. Nothing about the job is changed, and the submission never waits more than
the deadline (deadline_ms in tsched.conf) nor fails because of the predictor.

A user who wants no advice (and no wait for it) sets TSCHED_ADVICE=no in the environment.
Runs as the submitting user: tsched.conf's header_file must be readable by users (a token granting
only prediction in the cluster's namespace), or the server must need no token from this host.
Install: this file, tsched_client.lua and tsched.conf beside slurm.conf, and CliFilterPlugins=lua.
--]]

local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
local tsched = dofile(here .. "tsched_client.lua")
local config = tsched.read_config(here .. "tsched.conf")

--: Tell the user when the request is at least this many times the prediction.
local ADVISE_ABOVE = 2

-- A Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds, or nil.
local function seconds(text)
    if text == nil then
        return nil
    end
    local days, rest = text:match("^(%d+)%-(.+)$")
    local parts = {}
    for number in (rest or text):gmatch("[^:]+") do
        if not number:match("^%d+$") then
            return nil
        end
        table.insert(parts, tonumber(number))
    end
    if days ~= nil then
        local h, m, s = parts[1] or 0, parts[2] or 0, parts[3] or 0
        return ((tonumber(days) * 24 + h) * 60 + m) * 60 + s
    end
    if #parts == 1 then
        return parts[1] * 60
    elseif #parts == 2 then
        return parts[1] * 60 + parts[2]
    elseif #parts == 3 then
        return (parts[1] * 60 + parts[2]) * 60 + parts[3]
    end
    return nil
end

local function output(command)
    local pipe = io.popen(command)
    local text = pipe:read("*a") or ""
    pipe:close()
    return (text:gsub("%s+$", ""))
end

-- The account the job will be charged: the one given, else the user's default (sacctmgr), in lower case.
local function account_of(options, user_name)
    local account = options["account"] or os.getenv("SBATCH_ACCOUNT")
    if (account == nil or account == "") and user_name:match("^[%w._@-]+$") then
        account = output("sacctmgr -nP show user " .. user_name .. " format=DefaultAccount 2>/dev/null")
    end
    if account == nil or account == "" then
        return nil
    end
    return string.lower(account)
end

local function advise(options)
    if os.getenv("TSCHED_ADVICE") == "no" then
        return
    end
    local t_req = seconds(options["time"])
    if t_req == nil or t_req == 0 then
        return
    end
    local procs = tonumber(options["ntasks"] or "1") or 1
    local user_name = output("id -un")
    local job = {
        submit = os.time(),
        user = tonumber(output("id -u")),
        user_name = user_name,
        group = tonumber(output("id -g")),
        account = account_of(options, user_name),
        t_req = t_req,
        procs = procs,
    }
    local answer = tsched.predict(config, job)
    if answer == nil or answer.fallback or answer.t_sched * ADVISE_ABOVE > t_req then
        return
    end
    slurm.log_info("tsched: jobs like this one have run within %.1f min of the %.1f min requested; "
        .. "a shorter --time may start sooner", answer.t_sched / 60, t_req / 60)
end

function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
    local ok, error = pcall(advise, options)
    if not ok then
        slurm.log_debug("tsched: cli_filter.lua: %s", tostring(error))
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
    return slurm.SUCCESS
end
