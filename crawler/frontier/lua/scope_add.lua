-- Add what seeds cover to the crawl's scope (crawler/frontier/scopestate.py):
-- each form new to the set is appended to the log that every worker reads
-- from its own offset, so a form is in the log once however many workers
-- (or runs of a crawl id) add it.
--
-- KEYS[1]  the set of forms, KEYS[2] the log (one slot: {ns/scope})
-- ARGV     the forms ("d:DOMAIN", "h:HOST", "p:SURT-PREFIX")
-- Returns how many were new.
local new = {}
for _, form in ipairs(ARGV) do
  if redis.call('SADD', KEYS[1], form) == 1 then new[#new + 1] = form end
end
for j = 1, #new, 500 do
  redis.call('RPUSH', KEYS[2], unpack(new, j, math.min(j + 499, #new)))
end
return #new
