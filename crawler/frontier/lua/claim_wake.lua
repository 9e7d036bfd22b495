-- Part of claim.lua (included where it says so): steps 4 and 5, the
-- domains and addresses whose waiting hosts may go now. It reads the locals
-- claim.lua and claim_turns.lua set above its include line.

-- 4. Domains whose waiting hosts may go now: as many as the domain has room
-- for (one per turn when it has a delay) go back to the ready set
-- (refresh_host: if their sites have room too). While hosts still wait, the
-- domain is looked at again: when its next turn comes (domain_took), when one
-- of its leases ends (domain_lease_ended), or after a delay at the latest,
-- so a woken host that cannot go after all never strands the others. A full
-- domain is looked at again when its first lease in flight runs out at the
-- latest: a lease whose end is never reported (a robots job given up, its
-- worker gone) must not strand the hosts waiting for it. A paused domain is
-- woken by its resume (control.lua).
if look.dwake then
local wakes = redis.call('ZRANGEBYSCORE', p .. ':dwake', '-inf', now, 'LIMIT', 0, move_max)
for _, dom in ipairs(wakes) do
  redis.call('ZREM', p .. ':dwake', dom)
  forget_domain_wake(dom)
  local t, conc, delay, paused = domain_limits(dom)
  local room = move_max
  if conc > 0 then room = conc - domain_in_flight(p, dom, now, true) end
  if delay > 0 then room = math.min(room, 1) end
  if paused then
    -- the resume wakes it
  elseif now < t then
    wake_domain(p, dom, t)
  elseif room > 0 then
    local woken = redis.call('ZPOPMIN', p .. ':dw:' .. dom, room)
    dwake_at[dom], dw_filled[dom] = false, nil
    for j = 1, #woken, 2 do refresh_host(p, woken[j]) end
    wake_domain(p, dom, now + math.max(delay, 50))
  else
    local first = redis.call('ZRANGE', p .. ':di:' .. dom, 0, 0, 'WITHSCORES')
    wake_domain(p, dom, #first > 0 and tonumber(first[2]) or now + 50)
  end
end

end
-- 5. Hosts parked for their server's address whose time came (ipwake.lua
-- wakes them sooner, when the address has room): their site's address is
-- looked at again (a DNS job, below), which lets them go if their turn at
-- the address has come and keeps them parked, in their place, if not: a
-- wake time is a fallback, not a turn. With the IP scope off (a setting
-- changed), every parked host comes back at once.
if look.iwake then
local iwakes = redis.call('ZRANGEBYSCORE', p .. ':iwake', '-inf', ipscope and now or '+inf',
                         'LIMIT', 0, move_max)
for _, addr in ipairs(iwakes) do
  local parked = p .. ':iw:' .. addr
  iw_any[addr] = nil
  local due
  if ipscope then
    due = redis.call('ZRANGEBYSCORE', parked, '-inf', now, 'LIMIT', 0, move_max)
  else
    due = redis.call('ZRANGE', parked, 0, move_max - 1)
  end
  for _, host in ipairs(due) do
    redis.call('ZREM', parked, host)
    if ipscope then redis.call('HSET', site_key(p, host), S.address_until, 0) end
    refresh_host(p, host)
  end
  local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', p .. ':iwake', addr)
  else
    redis.call('ZADD', p .. ':iwake', math.max(tonumber(first[2]), now + 1), addr)
  end
end

end  -- step 5
