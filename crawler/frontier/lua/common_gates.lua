-- Part of common.lua (included at its end): the helpers of the domain and
-- IP scopes' gates, which every script that moves a host may need.

-- Domains: every site of one registered domain (www.a.test, img.a.test) is
-- gated together as well as alone. PP:d:DOMAIN holds the domain's next claim
-- (t) and next start (s) times; PP:di:DOMAIN its leases in flight by expiry,
-- so a lease whose worker vanished stops counting by itself; a host that
-- found its domain busy waits in PP:dw:DOMAIN, out of the ready set, and
-- PP:dwake says when to look at the domain again (claim.lua wakes it). The
-- limits are the claim's arguments: settings changed between runs apply.

-- How many leases of the domain are in flight now. Ended leases leave the
-- set when they are released; prune also drops those that ran out (a
-- vanished worker's robots job), which claim.lua does when it wakes the
-- domain.
local function domain_in_flight(p, dom, now, prune)
  local k = p .. ':di:' .. dom
  if prune then redis.call('ZREMRANGEBYSCORE', k, '-inf', now) end
  return redis.call('ZCOUNT', k, '(' .. now, '+inf')
end

-- A domain whose reservation a claim is making (claim.lua domain_reservation):
-- {dom, di, d, wake}, its leases (di), record fields (d) and wake, written
-- once at the reservation's end; the wakes its hosts would ask for one by
-- one are no sooner than that one.
local dom_batch = nil

-- What this script knows of domains' waits, so that a release or claim of
-- several of a domain's hosts looks once: dwake_at[dom], the domain's wake
-- in PP:dwake as read or written here (false: none); dw_filled[dom], true
-- once a host was put in PP:dw:DOM here. A step that changes either some
-- other way says so (forget_domain_wake).
local dwake_at, dw_filled = {}, {}
local function forget_domain_wake(dom)
  dwake_at[dom], dw_filled[dom] = nil, nil
end

-- Look at the domain's waiting hosts again at at_ms (the earliest ask wins).
local function wake_domain(p, dom, at_ms)
  if dom_batch and dom_batch.dom == dom then return end
  if not dw_filled[dom] and redis.call('EXISTS', p .. ':dw:' .. dom) == 0 then return end
  local cur = dwake_at[dom]
  if cur == nil then cur = redis.call('ZSCORE', p .. ':dwake', dom) or false end
  if not cur or at_ms < num(cur, 0) then
    redis.call('ZADD', p .. ':dwake', at_ms, dom)
    timer_at(p, at_ms, 'dwake')
    cur = at_ms
  end
  dwake_at[dom] = cur
end

-- A host waits for its domain: out of the ready set, in the domain's
-- waiting set (scored by when it is ready itself), the domain to be looked
-- at again at wake_at (the earliest ask wins).
-- (from_dw: a host a claim's domain reservation takes from the waiting set,
-- claim.lua; not in the ready set, and false once it waits here again.)
local from_dw = nil
local function queue_for_domain(p, host, dom, score, wake_at)
  if from_dw == host then
    from_dw = false
  else
    ready_moved[host] = false
    redis.call('ZREM', p .. ':ready', host)
  end
  redis.call('ZADD', p .. ':dw:' .. dom, score, host)
  dw_filled[dom] = true
  wake_domain(p, dom, wake_at)
end

-- refresh_site, by a step that holds the site's fields as they stand now (g:
-- read and written, READY_SITE and na among them) and maybe the host's n
-- and rw (nil: read here): a site of one authority (na, the size of
-- PP:ga:NAME; missing on sites an older build made) is placed without
-- reading it again, and no sooner than its domain's next turn (domain_at,
-- when the step knows it: a claim would only find the domain busy before).
-- turns_dom: the domain, when its sites take turns (m, claim.lua): then the
-- host waits for the domain's turn with the others (PP:dw:DOMAIN) instead,
-- where the domain's wake or reservation finds it; in the ready set it
-- would only be found busy by the next claim, and moved there.
local function refresh_site_known(p, host, g, n, rw, domain_at, turns_dom)
  if g[S.hosts] ~= '1' and g[S.hosts] ~= 1 then return refresh_site(p, host) end
  if n == nil then
    local st = redis.call('HMGET', p .. ':h:' .. host, H.queued, H.robots_wait)
    n, rw = st[1], st[2]
  end
  local at = ready_at(n, rw, g)
  if at and turns_dom then
    queue_for_domain(p, host, turns_dom, at, math.max(at, domain_at or 0))
  else
    place_host(p, host, at and math.max(at, domain_at or 0))
  end
end

-- A lease (member: a fingerprint, or "R" .. host for a robots job) of the
-- site sk's domain ended: a waiting host may take its place. (known: the
-- site's domain field as the caller read it, false when it has none.)
local function domain_lease_ended(p, sk, member, now, known)
  local dom = known
  if dom == nil then dom = redis.call('HGET', sk, S.domain) end
  if not dom then return end
  redis.call('ZREM', p .. ':di:' .. dom, member)
  local t = num(redis.call('HGET', p .. ':d:' .. dom, D.next_claim), 0)
  wake_domain(p, dom, math.max(now, t))
end

-- IP scope (ipgate.lua): a host whose server address has no room is parked
-- in PP:iw:ADDR, scored by when to look at it again, out of the ready set:
-- the end of a request on the address wakes it (ipwake.lua) or, should that
-- wake be lost with its worker, its own time does (claim.lua; PP:iwake says
-- when to look at an address's parked hosts). The site keeps the address it
-- was parked for (ip) and until when that is known (ipx, from the DNS
-- answer's TTL), so its other hosts, and the next URL of this one, join the
-- parked hosts instead of being claimed for nothing.
-- (iw_any[addr]: whether PP:iw:ADDR holds hosts, as this script knows it;
-- nil: not known, look.)
local iw_any = {}
local function ip_has_parked(p, addr)
  if iw_any[addr] == nil then
    iw_any[addr] = redis.call('EXISTS', p .. ':iw:' .. addr) == 1
  end
  return iw_any[addr]
end

local function park_for_ip(p, host, addr, at)
  ready_moved[host] = false
  redis.call('ZREM', p .. ':ready', host)
  iw_any[addr] = true
  local parked = p .. ':iw:' .. addr
  if not redis.call('ZSCORE', parked, host) then redis.call('ZADD', parked, at, host) end
  local cur = redis.call('ZSCORE', p .. ':iwake', addr)
  if not cur or at < num(cur, 0) then
    redis.call('ZADD', p .. ':iwake', at, addr)
    timer_at(p, at, 'iwake')
  end
end

-- An address unused this long is forgotten: its gate's keys expire (not the
-- gate hash while it holds an operator's override: st is its HMGET of
-- s, wk, xc, xd, xp).
local IP_IDLE_MS = 3600000
local function ip_keep(key, ms, st)
  if st and (st[3] or st[4] or st[5]) then return end
  redis.call('PEXPIRE', key, ms)
end

-- How many more requests an address has room for: its concurrency less its
-- requests in flight and its places reserved (both cleaned of those that ran out).
local function ip_room(in_flight, reserved, conc, now)
  redis.call('ZREMRANGEBYSCORE', in_flight, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', reserved, '-inf', now)
  return conc - redis.call('ZCARD', in_flight) - redis.call('ZCARD', reserved)
end

-- Pop up to room hosts from the head of an address's queue (KEYS as
-- ipgate.lua: gate, in flight, queue, reservations), reserve a place for
-- each (reserve_ms, with a concurrency limit) and space their starts by the
-- delay (the gate's wk: the last wake handed out). st is the gate's HMGET of
-- s, wk, xc, xd, xp. Returns {at_ms, "P\nHOST", ...}: whom the caller wakes
-- in its partition (ipwake.lua), and from when it may start.
local function ip_pop_waiters(keys, room, conc, delay, st, reserve_ms, now)
  local woken = redis.call('ZPOPMIN', keys[3], room)
  local out = {}
  local at, wk = math.max(now, num(st[1], 0)), num(st[2], 0)
  for j = 1, #woken, 2 do
    if delay > 0 then
      at = math.max(at, wk + delay)
      wk = at
    end
    if conc > 0 then redis.call('ZADD', keys[4], at + reserve_ms, woken[j]) end
    out[#out + 1] = at
    out[#out + 1] = woken[j]
  end
  if conc > 0 and #woken > 0 then ip_keep(keys[4], IP_IDLE_MS) end
  if delay > 0 and #woken > 0 then
    redis.call('HSET', keys[1], IG.last_wake, wk)
    ip_keep(keys[1], IP_IDLE_MS, st)
  end
  return out
end
