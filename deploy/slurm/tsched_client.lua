--[[
tsched_client.lua: ask the tsched predictor service for a job's t_sched, from Slurm's Lua plugins.

Shared by job_submit.lua (in slurmctld) and cli_filter.lua (in sbatch/salloc). It speaks gRPC through
curl (HTTP/2, one process of a few milliseconds) because a Python client takes about 0.35 s just to
import grpc, more than the whole deadline a submission may wait. The request and answer are the
service's protobuf messages (protos/tsched/v1/predictor.proto), encoded here by hand: a handful of
integer fields. curl's --max-time is the deadline; on any failure the caller gets nil and a reason.

Whatever the process at the address does (a crashed, hung, hostile or port-squatting one), a question
costs at most the deadline and MAX_ANSWER_BYTES: curl stops the transfer at the deadline and past the
size, only that much of the answer is read, at most MAX_QUANTILES quantiles are parsed, and an answer
outside [1 s, t_req] is refused, so the admin comment stays under MAX_COMMENT_BYTES.

Settings come from tsched.conf beside this file (KEY=VALUE lines, # comments):
  address        HOST:PORT or unix:PATH of `tsched serve` (default 127.0.0.1:50051)
  namespace      the cluster's namespace (default: the server's default)
  estimator      an estimator SPEC (default: the server's first)
  deadline_ms    how long a submission may wait for the answer (default 100)
  header_file    a file holding "authorization: Bearer TOKEN" (for a server with --tokens; chmod 600)
  ca_file        the CA to check a TLS server against (https)
  set_time_min   yes: also set the job's time_min to the prediction (default no: advisory only)
  curl           the curl binary (default curl)
Lua 5.1 (Debian's Slurm): no bit operations, no string.pack.
--]]

local M = {}

-- An honest answer takes under 200 bytes; the bounds leave room for growth and none for abuse.
M.MAX_ANSWER_BYTES = 4096
M.MAX_HEADER_BYTES = 8192
M.MAX_QUANTILES = 8
M.MAX_COMMENT_BYTES = 160

M.defaults = {
    address = "127.0.0.1:50051",
    namespace = "",
    estimator = "",
    deadline_ms = "100",
    header_file = "",
    ca_file = "",
    set_time_min = "no",
    curl = "curl",
}

function M.read_config(path)
    local config = {}
    for key, value in pairs(M.defaults) do
        config[key] = value
    end
    local file = io.open(path, "r")
    if file == nil then
        return config
    end
    for line in file:lines() do
        local key, value = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
        if key ~= nil and M.defaults[key] ~= nil then
            config[key] = value
        end
    end
    file:close()
    return config
end

-- protobuf: varints, length-delimited fields, and doubles (little-endian IEEE 754)

local function varint(n)
    local out = {}
    n = math.floor(n)
    repeat
        local byte = n % 128
        n = math.floor(n / 128)
        if n > 0 then
            byte = byte + 128
        end
        out[#out + 1] = string.char(byte)
    until n == 0
    return table.concat(out)
end

local function int_field(number, value)
    return varint(number * 8) .. varint(value)
end

local function bytes_field(number, bytes)
    if bytes == "" then
        return ""
    end
    return varint(number * 8 + 2) .. varint(#bytes) .. bytes
end

local function read_varint(s, pos)
    local value, scale = 0, 1
    while true do
        local byte = s:byte(pos)
        if byte == nil then
            return nil, pos
        end
        pos = pos + 1
        value = value + (byte % 128) * scale
        if byte < 128 then
            return value, pos
        end
        scale = scale * 128
    end
end

local function double(b)
    local b1, b2, b3, b4, b5, b6, b7, b8 = b:byte(1, 8)
    local sign = b8 >= 128 and -1 or 1
    local exponent = (b8 % 128) * 16 + math.floor(b7 / 16)
    local mantissa = ((((((b7 % 16) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 256 + b1
    if exponent == 0 then
        return sign * mantissa * 2 ^ -1074
    end
    return sign * (1 + mantissa / 2 ^ 52) * 2 ^ (exponent - 1023)
end

-- A message's fields: number -> list of values (numbers for varints, strings otherwise).
local function fields(s)
    local out, pos = {}, 1
    while pos <= #s do
        local key, value
        key, pos = read_varint(s, pos)
        if key == nil then
            return nil
        end
        local number, wire = math.floor(key / 8), key % 8
        if wire == 0 then
            value, pos = read_varint(s, pos)
        elseif wire == 1 then
            value, pos = s:sub(pos, pos + 7), pos + 8
        elseif wire == 2 then
            local length
            length, pos = read_varint(s, pos)
            value, pos = s:sub(pos, pos + length - 1), pos + length
        elseif wire == 5 then
            value, pos = s:sub(pos, pos + 3), pos + 4
        else
            return nil
        end
        out[number] = out[number] or {}
        table.insert(out[number], value)
    end
    return out
end

local function first(message, number, default)
    local values = message[number]
    if values == nil then
        return default
    end
    return values[1]
end

-- A user or account name the service takes (Slurm's names are short, printable, no spaces), or nil.
local function usable_name(name)
    if type(name) == "string" and #name > 0 and #name <= 128 and name:match("^[%w._@-]+$") then
        return name
    end
    return nil
end

-- A count the job asked for (nodes, memory in MB, GPUs) as a Job field, or nothing when it said none.
local function count_field(number, value)
    if type(value) == "number" and value >= 1 and value < 2 ^ 53 then
        return int_field(number, value)
    end
    return ""
end

-- The PredictRequest of tsched.v1 for `job`, framed for gRPC: submit, t_req and procs; the user by name
-- (`user_name`, else the number `user`) and the account by name (`account`, else the number `group`), as
-- the site's history is keyed (docs/deployment.md, "One identity and one clock"); the partition and QOS by
-- name, the nodes, memory (MB) and GPUs asked for and whether whole nodes, where the job says; its name
-- (`job_name`, its application) where it is a plain one, as jobcomp.sh writes it.
function M.predict_request(config, job)
    local user_name, account = usable_name(job.user_name), usable_name(job.account)
    local partition, qos = usable_name(job.partition), usable_name(job.qos)
    local job_name = usable_name(job.job_name)
    local message = int_field(2, job.submit)
        .. (user_name and bytes_field(10, user_name) or int_field(3, job.user))
        .. (account and bytes_field(12, account) or int_field(4, job.group))
        .. int_field(5, job.t_req)
        .. int_field(6, job.procs)
        .. count_field(13, job.nodes)
        .. count_field(14, job.memory_mb)
        .. count_field(15, job.gpus)
        .. (job.exclusive and int_field(17, 1) or "")
        .. (partition and bytes_field(18, partition) or "")
        .. (qos and bytes_field(19, qos) or "")
        .. (job_name and bytes_field(20, job_name) or "")
    local request = bytes_field(1, config.namespace) .. bytes_field(2, config.estimator) .. bytes_field(3, message)
    local length = #request
    local prefix = string.char(0, math.floor(length / 16777216) % 256, math.floor(length / 65536) % 256,
        math.floor(length / 256) % 256, length % 256)
    return prefix .. request
end

-- The answer in a gRPC response body, or nil.
function M.parse_response(body)
    if body == nil or #body < 5 then
        return nil
    end
    local response = fields(body:sub(6))
    if response == nil or response[1] == nil then
        return nil
    end
    local prediction = fields(response[1][1])
    if prediction == nil then
        return nil
    end
    local answer = {
        t_sched = first(prediction, 1, 0),
        fallback = first(prediction, 4, 0) == 1,
        estimator = first(response, 2, ""),
        quantiles = {},
    }
    for index, raw in ipairs(response[5] or {}) do
        if index > M.MAX_QUANTILES then
            break
        end
        local quantile = type(raw) == "string" and fields(raw) or nil
        if quantile ~= nil and type(quantile[1]) == "table" and type(quantile[1][1]) == "string" and #quantile[1][1] == 8 then
            table.insert(answer.quantiles, { probability = double(quantile[1][1]), runtime = first(quantile, 2, 0) })
        end
    end
    if response[6] ~= nil and type(response[6][1]) == "string" and #response[6][1] == 8 then
        answer.p_underestimate = double(response[6][1])
    end
    return answer
end

-- Whether an answer for `job` is one an honest predictor gives: an estimate in [1, t_req], numbers in range.
function M.plausible(answer, job)
    if type(answer.t_sched) ~= "number" or answer.t_sched < 1 or answer.t_sched > job.t_req then
        return false
    end
    for _, quantile in ipairs(answer.quantiles) do
        if not (quantile.probability > 0 and quantile.probability < 1)
            or type(quantile.runtime) ~= "number" or quantile.runtime < 0 or quantile.runtime > job.t_req then
            return false
        end
    end
    local p = answer.p_underestimate
    return p == nil or (p >= 0 and p <= 1)
end

local function quoted(text)
    return "'" .. text:gsub("'", "'\\''") .. "'"
end

-- At most `limit` bytes of a file, and whether there was more.
local function read_at_most(path, limit)
    local file = io.open(path, "rb")
    if file == nil then
        return "", false
    end
    local text = file:read(limit + 1) or ""
    file:close()
    return text:sub(1, limit), #text > limit
end

-- Ask the service; returns the answer, or nil and why (a timeout, a refusal, a server that is down).
function M.predict(config, job)
    local request_file, body_file, header_file, status_file = os.tmpname(), os.tmpname(), os.tmpname(), os.tmpname()
    local file = io.open(request_file, "wb")
    file:write(M.predict_request(config, job))
    file:close()
    local address, url_host, options = config.address, nil, {}
    if address:sub(1, 5) == "unix:" then
        table.insert(options, "--unix-socket " .. quoted(address:sub(6)))
        url_host = "localhost"
    else
        url_host = address
    end
    local scheme = "http"
    if config.ca_file ~= "" then
        scheme = "https"
        table.insert(options, "--cacert " .. quoted(config.ca_file))
    else
        table.insert(options, "--http2-prior-knowledge")
    end
    if config.header_file ~= "" then
        table.insert(options, "-H @" .. quoted(config.header_file))
    end
    local deadline = string.format("%.3f", tonumber(config.deadline_ms) / 1000)
    -- The answer goes through `head`, which stops curl (SIGPIPE) one byte past the bound, whatever the size
    -- it announces; curl's own status is kept in a file.
    local command = "{ " .. table.concat({
        quoted(config.curl), "-sS", "--max-time", deadline, "--connect-timeout", deadline,
        "--max-filesize", tostring(M.MAX_ANSWER_BYTES), "--proto", "=http,https", "--max-redirs", "0",
        table.concat(options, " "), "-H 'content-type: application/grpc'", "-H 'te: trailers'",
        "--data-binary @" .. quoted(request_file), "-o -", "-D", quoted(header_file),
        quoted(scheme .. "://" .. url_host .. "/tsched.v1.Predictor/Predict"), "2>/dev/null; echo $? >",
        quoted(status_file), "; } | head -c", tostring(M.MAX_ANSWER_BYTES + 1), ">", quoted(body_file),
    }, " ")
    os.execute(command)
    local body, too_large = read_at_most(body_file, M.MAX_ANSWER_BYTES)
    local headers = read_at_most(header_file, M.MAX_HEADER_BYTES)
    local status = read_at_most(status_file, 16)
    for _, path in ipairs({ request_file, body_file, header_file, status_file }) do
        os.remove(path)
    end
    status = tonumber(status:match("%d+"))
    if status == 63 or too_large then
        return nil, "an answer over " .. M.MAX_ANSWER_BYTES .. " bytes: is the address a tsched service?"
    end
    if status ~= 0 then
        local reasons = { [7] = "the service is down", [28] = "no answer within " .. config.deadline_ms .. " ms" }
        return nil, reasons[status] or ("curl exited with " .. tostring(status))
    end
    local answer = M.parse_response(body)
    if answer == nil then
        local code = (headers:match("grpc%-status: *(%d+)") or "?"):sub(1, 4)
        local message = (headers:match("grpc%-message: *([%w%p ]*)") or ""):sub(1, 200)
        return nil, "refused (gRPC status " .. code .. ") " .. message
    end
    if not M.plausible(answer, job) then
        return nil, "an answer no tsched service gives (estimate outside [1, t_req]): is the address a tsched service?"
    end
    return answer
end

-- What the job's admin comment says: the estimate, its 90% quantile and P(underestimate) when known.
function M.comment(answer)
    local parts = { "tsched:t_sched=" .. string.format("%d", answer.t_sched) }
    if answer.fallback then
        table.insert(parts, "fallback=1")
    end
    for _, quantile in ipairs(answer.quantiles) do
        if math.abs(quantile.probability - 0.9) < 1e-9 then
            table.insert(parts, "p90=" .. string.format("%d", quantile.runtime))
        end
    end
    if answer.p_underestimate ~= nil then
        table.insert(parts, string.format("p_under=%.2f", answer.p_underestimate))
    end
    return table.concat(parts, ","):sub(1, M.MAX_COMMENT_BYTES)
end

return M
