-- migration 11 reversed: the claim functions join the open transactions'
-- xids laterally again, as migration 8 wrote them.

CREATE OR REPLACE FUNCTION herald.outbox_claim(p_handler text, p_part int, p_owner text, p_lease interval, p_limit int, p_tries int, p_range_limit int)
-- herald:rest-from 008_handlers.up.sql

CREATE OR REPLACE FUNCTION herald.outbox_range_runs(p_handler text, p_part int, p_max int)
-- herald:rest-from 008_handlers.up.sql
