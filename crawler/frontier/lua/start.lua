-- May a request to this host start now? The last gate before the download.
--
-- Claims are spaced by the host's delay, but a claimed URL can wait in a
-- worker (a busy reactor, a middleware) before it is sent, and two workers'
-- waits differ. This gate spaces the actual starts, for all workers, by the
-- smallest gap the delay allows: delay x (1 - jitter), and never less than
-- the host's floor fl (a robots.txt Crawl-delay, which jitter must not cut).
-- A backoff hold bk (Retry-After, a 429 / 503, a breaker cooling down) set
-- after the URL was claimed keeps it from starting too. (Not w: that also
-- holds a host while its robots.txt or a breaker probe is in flight, which
-- must not stop the probe itself.)
--
-- A request that passed the gate and then sat in a stalled worker passes it
-- again (its turn is stale). It names the turn its first pass set (site_turn):
-- if no request of the site started since, the site's gate still holds that
-- turn, and the request starts now without waiting out its own reservation;
-- the next gap counts from now.
--
-- The host's registered domain has a gate of its own (KEYS[2], field s),
-- spaced by the domain delay the same way; a request starts only when both
-- gates let it, and then moves both on.
--
-- A request whose worker stood still (SIGSTOP, a swapped-out VM) past its
-- lease must not start at all: another worker may have the URL now. It
-- names its lease (ARGV[1], and its worker) and is refused unless its
-- worker holds it still: the lease is the fencing token, checked here and
-- by release.lua.
--
-- A request that passes here reaches its socket a moment later (a reactor
-- turn or two, longer on a busy worker): its worker names how long it
-- allows for that (its start window, window_ms), and the next start of the
-- site and of its domain waits that much longer, as after a claim (a
-- worker saturated past it would otherwise find its turn stale at the
-- socket again and again, and ask here each time).
--
-- KEYS[1]  the site hash (PP:g:NAME: every scheme and port of a name share
--          it), KEYS[2] the domain hash (PP:d:DOMAIN), KEYS[3] the
--          partition's leases (PP:leased)
-- ARGV[1]  the request's lease (its member of PP:leased, which names its
--          worker: common.lua lease_fields; binary) or ''
-- ARGV[2]  the rest, a JSON object by name (scriptargs.start_args): jitter
--          (0..1); site_turn and domain_turn, the turns of an earlier pass
--          (left out: none); domain_delay_ms (0: no domain gate); worker;
--          window_ms, the start window (0: none)
-- Returns {0, turn, domain turn} (start now; the gates are moved on to those
-- turns), {ms to wait, 0, 0}, {-1, 0, 0}: the site or its domain is paused
-- by an operator (the request goes back to its queue), or {-2, 0, 0}: the
-- lease is not the worker's any more (the request is dropped).
local a = cjson.decode(ARGV[2])
if ARGV[1] ~= '' then
  local holder = select(3, lease_fields(ARGV[1]))
  if holder ~= a.worker or not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return {-2, 0, 0} end
end
local now = now_ms()
local jitter = num(a.jitter, 0)
local st = redis.call('HMGET', KEYS[1], S.next_start, S.delay, S.floor, S.backoff, S.ctl_delay,
                      S.ctl_paused)
local gate, delay = num(st[1], 0) or 0, delay_in_force(st[2], st[5])
local hold = num(st[4], 0) or 0
local dst = redis.call('HMGET', KEYS[2], D.next_start, D.ctl_delay, D.ctl_paused)
if st[6] or dst[3] then return {-1, 0, 0} end
local ddelay = delay_in_force(a.domain_delay_ms or 0, dst[2])

-- Until when does a gate at `at` keep this request waiting (0: not at all)?
local function blocked_until(at, earlier)
  if now >= at then return 0 end
  if earlier ~= nil and at == tonumber(earlier) then return 0 end
  return at
end

local wait = math.max(blocked_until(gate, a.site_turn), hold > now and hold or 0)
if ddelay > 0 then
  wait = math.max(wait, blocked_until(num(dst[1], 0), a.domain_turn))
end
if wait > 0 then return {wait - now, 0, 0} end
local window = num(a.window_ms, 0)
local gap = math.max(num(st[3], 0) or 0, math.floor(delay * (1 - jitter)))
if gap > 0 then gap = gap + window end
redis.call('HSET', KEYS[1], S.next_start, now + gap)
local dturn = 0
if ddelay > 0 then
  dturn = now + math.floor(ddelay * (1 - jitter)) + window
  redis.call('HSET', KEYS[2], D.next_start, dturn)
end
return {0, now + gap, dturn}
