-- wrk script for bench/relay: POST /v1/messages (JSON, bearer secret) to one or more relay nodes, counts
-- every response that is not 202, writes the id of every 202 to a file, and prints one machine-readable line.
--
--   BENCH_PORTS=P1[,P2] BENCH_SECRET=S BENCH_IDS=PREFIX \
--       wrk -tT -cC -dD -s bench/relay.lua http://127.0.0.1:P1/v1/messages
--
-- Thread i sends to port number ((i - 1) mod #ports) + 1, with a matching Host header, so with two ports and
-- two threads each node gets half the connections. Thread i writes the ids it was given, one a line, to
-- PREFIX.i (the script compares them with what arrives in the Maildir).
--
-- The last line wrk prints is:
--   BENCH requests=N duration_us=N rps=F p50_us=N p99_us=N max_us=N accepted=N unexpected=N connect=N read=N
--         write=N timeout=N unexpected_statuses=CODE:COUNT,... (or -)
-- accepted = 202 responses; unexpected = responses with any other status, by code in unexpected_statuses;
-- connect/read/write/timeout = wrk's socket errors.

local threads = {}
local ports = {}
for port in string.gmatch(os.getenv("BENCH_PORTS") or "", "[0-9]+") do
   table.insert(ports, port)
end

function setup(thread)
   table.insert(threads, thread)
   local index = #threads
   local port = ports[(index - 1) % #ports + 1]
   thread.addr = wrk.lookup("127.0.0.1", port)[1]
   thread:set("port", port)
   thread:set("index", index)
end

function init(args)
   accepted = 0
   unexpected = 0
   statuses = {}
   wrk.method = "POST"
   wrk.path = "/v1/messages"
   wrk.headers["Host"] = "127.0.0.1:" .. port
   wrk.headers["Content-Type"] = "application/json"
   wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_SECRET")
   wrk.body = '{"to":"me@example.com","subject":"bench","body":"buy milk, then the relay benchmark"}'
   ids = assert(io.open(os.getenv("BENCH_IDS") .. "." .. index, "w"))
   ids:setvbuf("full")
end

function response(status, headers, body)
   if status == 202 then
      accepted = accepted + 1
      ids:write(string.match(body, '"id"%s*:%s*"([^"]+)"') or "?", "\n")
   else
      unexpected = unexpected + 1
      statuses[status] = (statuses[status] or 0) + 1
   end
end

function done(summary, latency, requests)
   local accepted_total, unexpected_total = 0, 0
   local by_status = {}
   for _, thread in ipairs(threads) do
      accepted_total = accepted_total + (thread:get("accepted") or 0)
      unexpected_total = unexpected_total + (thread:get("unexpected") or 0)
      for status, count in pairs(thread:get("statuses") or {}) do
         by_status[status] = (by_status[status] or 0) + count
      end
   end
   local codes = {}
   for status, count in pairs(by_status) do
      table.insert(codes, status .. ":" .. count)
   end
   table.sort(codes)
   local seconds = summary.duration / 1e6
   local errors = summary.errors
   io.write(string.format(
      "BENCH requests=%d duration_us=%d rps=%.1f p50_us=%d p99_us=%d max_us=%d accepted=%d unexpected=%d " ..
      "connect=%d read=%d write=%d timeout=%d unexpected_statuses=%s\n",
      summary.requests, summary.duration, seconds > 0 and summary.requests / seconds or 0,
      latency:percentile(50), latency:percentile(99), latency.max, accepted_total, unexpected_total,
      errors.connect, errors.read, errors.write, errors.timeout,
      #codes > 0 and table.concat(codes, ",") or "-"))
end
