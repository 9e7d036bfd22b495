-- Store the outcome of a host's robots.txt fetch, for every worker.
-- (common.lua is prepended: now_ms, refresh_host.)
--
-- claim.lua handed the host out as a robots job (rs = "f", held by rw). Here:
-- * "ok" (2xx rules, or 4xx "unavailable": allow all): the rules are stored
--   in PP:r (a blob the workers decode), cached until now + ttl; the host's
--   pacing (rc, rdl, rfl) becomes what the worker computed from the project's
--   settings and the file's Crawl-delay / Request-rate, and its site is paced
--   by the strictest of its hosts' files (pace_site); its version rv moves on so that
--   workers reload their in-process copy; the hold is lifted.
-- * "fail" (5xx, 429, timeout, network error: "unreachable"): attempt ra + 1;
--   the next try is after base * 2^(ra - 1) ms, or the Retry-After the
--   server sent if longer, capped. A last good copy no
--   older than stale_max ms keeps serving meanwhile (RFC 9309 2.4); without
--   one the host is held (complete disallow) and, after max_attempts, the
--   caller parks its queued URLs as dead letters.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix, ARGV[2] host, ARGV[3] "ok" or "fail",
-- ARGV[4]  ttl ms, ARGV[5] blob, ARGV[6] concurrency, ARGV[7] delay ms,
-- ARGV[8]  floor ms (robots delay), ARGV[9] gap ms before the first page,
-- ARGV[10] retry base ms, ARGV[11] retry cap ms, ARGV[12] max attempts (0: no
--          parking), ARGV[13] stale max ms, ARGV[14] the shortest wait before the
--          next try, ms (the answer's Retry-After; capped like the backoff)
-- Returns {state, attempts, version}: state "rules", "stale", "unreachable"
-- or "park".
local p, host, outcome = ARGV[1], ARGV[2], ARGV[3]
local hk = p .. ':h:' .. host
local now = now_ms()
-- (every host record has n: none, the host is gone)
local hs = redis.call('HMGET', hk, 'n', 'rv', 'ra', 'rt')
if not hs[1] then return {'gone', 0, 0} end
local sk = site_key(p, host)
local SITE_READ = {'d', 'na', 'i', 'c', 't', 'w', 'rj', 'xc', 'xp', 'fl', 'dl', 'ad', 'dj', 's', 'bj'}
local g = record(sk, SITE_READ)
-- The fetch no longer counts against the host's domain.
domain_lease_ended(p, sk, 'R' .. host, now, g.d or false)

-- The site (every authority of the name) is paced by the strictest of its
-- authorities' robots.txt files that are known: the smallest concurrency,
-- the longest delay and Crawl-delay floor. (w: the site's fields to write;
-- a site of one authority has this file's alone.)
local function pace_site(w, site)
  if g.na == '1' then
    w.c, w.dl, w.fl = ARGV[6], ARGV[7], ARGV[8]
    return
  end
  local c, dl, fl
  for _, h in ipairs(redis.call('SMEMBERS', p .. ':ga:' .. site)) do
    local st = redis.call('HMGET', p .. ':h:' .. h, 'rs', 'rc', 'rdl', 'rfl')
    if st[1] == 'k' and st[2] then
      local hc, hdl, hfl = tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
      c = c and math.min(c, hc) or hc
      dl = dl and math.max(dl, hdl) or hdl
      fl = fl and math.max(fl, hfl) or hfl
    end
  end
  if c then w.c, w.dl, w.fl = c, dl, fl end
end

-- The site's fields written, and the host (its robots wait over) placed:
-- a site of one authority from what this script holds, else every authority
-- read again.
local function settle(w)
  hset_fields(sk, w)
  if g.na == '1' then
    place_host(p, host, ready_at(hs[1], 0, as_written(g, w)))
  else
    refresh_site(p, host)
  end
end

local version = num(hs[2], 0)
if outcome == 'ok' then
  version = version + 1
  redis.call('HSET', hk, 'rs', 'k', 'rx', now + tonumber(ARGV[4]), 'ra', 0, 'rw', 0,
             'rc', ARGV[6], 'rdl', ARGV[7], 'rfl', ARGV[8], 'rt', now, 'rv', version)
  local w = {rj = 0}
  pace_site(w, site_of(host))
  -- The first page waits its gap after this fetch, at the claim (t) and at
  -- the start gate (s) alike.
  local first = now + tonumber(ARGV[9])
  w.t, w.s = math.max(num(g.t, 0), first), math.max(num(g.s, 0), first)
  redis.call('HSET', p .. ':r', host, ARGV[5])
  hincr(KEYS[1], 'robots_fetched', 1)
  settle(w)
  return {'rules', 0, version}
end

local attempts = num(hs[3], 0) + 1
local base, cap = tonumber(ARGV[10]), tonumber(ARGV[11])
local backoff = math.min(math.max(base * 2 ^ (attempts - 1), num(ARGV[14], 0)), cap)
local good = num(hs[4], -1)
hincr(KEYS[1], 'robots_failed', 1)
if good >= 0 and now - good <= tonumber(ARGV[13]) then
  redis.call('HSET', hk, 'ra', attempts, 'rs', 'k', 'rx', now + backoff, 'rw', 0, 'rh', backoff)
  settle({rj = 0})
  return {'stale', attempts, version}
end
redis.call('HSET', hk, 'ra', attempts, 'rs', 'u', 'rw', now + backoff, 'rh', backoff)
-- (the host waits out rw: read again)
hset_fields(sk, {rj = 0})
refresh_site(p, host)
local max_attempts = tonumber(ARGV[12])
if max_attempts > 0 and attempts >= max_attempts then
  return {'park', attempts, version}
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {'unreachable', attempts, version}
