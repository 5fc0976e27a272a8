-- The rows of an outbox at schema version 6 with records in every state
-- (pg-v6-ids.json names them), written by Herald before its stores became
-- packages and its migrations files (commit cfa1d77 added the dump and its
-- generator), as pg_dump wrote them. TestPostgresFixtureUpgradesInPlace
-- loads them into the schema the embedded migrations 1 to 6 build, which
-- is the one that Herald wrote (pg_dump --schema-only of the two differ
-- only in how a restore writes a CHECK's nested ANDs); the test pins
-- those six files.

SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET client_min_messages = warning;

-- What the migrations wrote, replaced by what that Herald had.
TRUNCATE herald.outbox_partition, herald.outbox_repartition, herald.outbox_wakeup, herald.schema_migrations;

--
-- Data for Name: outbox_batch; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_batch (part, fence, lo, hi, from_xid, from_seq, to_xid, to_seq, records, done_at, by_seq) FROM stdin;
3	1	724:724:	726:726:	0	0	0	2	2	2026-12-06 02:36:31.55861+00	t
3	2	726:726:	733:733:	0	0	0	5	3	2026-12-06 02:36:31.571749+00	t
1	1	724:724:	736:736:	0	0	0	7	2	2026-12-06 02:36:31.576659+00	t
\.


--
-- Data for Name: outbox_default; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_default (id, seq, xid, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind) FROM stdin;
01a24935-c9ab-765a-a662-d20f02ba59b7	1	725	acme	f/done	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.531088+00	notification
01a24935-c9ad-7df7-8c02-9d83ad1cf31a	2	725	acme	f/done	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.531088+00	notification
01a24935-c9d0-798d-ace5-cd63df61c123	3	731	acme	f/dead	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.568568+00	notification
01a24935-c9d1-790a-ac01-eeb859cba1ba	4	732	acme	f/retry	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification
01a24935-c9d1-7e8f-b00a-b751bf4cb89f	5	732	acme	f/retry	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification
01a24935-c9d6-72af-9403-4bdc7bfd438e	6	735	acme	f/mid	order.updated	1	{"n": 0}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d6-775d-9be8-bb25747e6fac	7	735	acme	f/mid	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d6-7c4b-9231-eab3c0e6f376	8	735	acme	f/mid	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d7-7090-b3d5-1829382e4984	9	735	acme	f/mid	order.updated	1	{"n": 3}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d7-72bd-b646-cfce8243eba3	10	735	acme	f/mid	order.updated	1	{"n": 4}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d7-746d-ac5a-a1c214748515	11	735	acme	f/mid	order.updated	1	{"n": 5}	{"mode": "immediate"}	2026-12-06 02:36:31.574091+00	notification
01a24935-c9d9-725f-ba4c-4f24dd691a32	12	738	acme	f/open	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.577086+00	notification
01a24935-c9db-7365-8055-848190a0eb6d	13	740	acme	f/pending	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.57919+00	notification
01a24935-c9db-7651-92d0-febe329cf0b9	14	740	acme	f/pending	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.57919+00	notification
\.


--
-- Data for Name: outbox_partition; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_partition (part, owner, expires_at, fence, lo, hi, pos_xid, pos_seq, open, takeovers, state, claimed_at, done_at, batches, tk_range, claim_qto, tk_qseq) FROM stdin;
0	\N	\N	0	724:724:	\N	0	0	f	0	active	\N	\N	0	f	0	0
2	\N	\N	0	724:724:	\N	0	0	f	0	active	\N	\N	0	f	0	0
1	\N	\N	1	724:724:	736:736:	0	7	f	0	active	2026-12-06 02:36:31.575959+00	2026-12-06 02:36:31.576659+00	1	f	0	0
3	dead-worker	2026-12-06 02:36:31.57865+00	3	733:733:	739:739:	0	0	t	0	active	2026-12-06 02:36:31.57765+00	2026-12-06 02:36:31.571749+00	2	f	0	0
\.


--
-- Data for Name: outbox_repartition; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_repartition (id, retire_xmax, wait_vxids) FROM stdin;
t	\N	\N
\.


--
-- Data for Name: outbox_replay; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_replay (id, message_id, actor, reason, replayed_at, failure) FROM stdin;
\.


--
-- Data for Name: outbox_retry; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_retry (qseq, id, seq, xid, rec_part, part, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, state, attempt, next_attempt_at, last_error, dispatched_at, dead_lettered_at) FROM stdin;
1	01a24935-c9d0-798d-ace5-cd63df61c123	3	731	3	3	acme	f/dead	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.568568+00	notification	dead_letter	1	2026-12-06 02:36:31.571749+00	the target refused it	\N	2026-12-06 02:36:31.571749+00
2	01a24935-c9d1-790a-ac01-eeb859cba1ba	4	732	3	3	acme	f/retry	order.updated	1	{"n": 1}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification	pending	1	2026-12-06 03:36:31.571749+00	target busy	\N	\N
3	01a24935-c9d1-7e8f-b00a-b751bf4cb89f	5	732	3	3	acme	f/retry	order.updated	1	{"n": 2}	{"mode": "immediate"}	2026-12-06 02:36:31.569571+00	notification	pending	0	2026-12-06 02:36:31.571749+00	\N	\N	\N
\.


--
-- Data for Name: outbox_segment; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_segment (name, from_seq, to_seq, created_at, archived_at, newest_at) FROM stdin;
\.


--
-- Data for Name: outbox_v2; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_v2 (id, seq, tenant_id, channel, type, schema_version, payload, freshness, occurred_at, kind, state, attempt, next_attempt_at, lease_owner, lease_expires_at, fence, last_error, dispatched_at, dead_lettered_at) FROM stdin;
\.


--
-- Data for Name: outbox_wakeup; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.outbox_wakeup (id, armed_until) FROM stdin;
t	2026-12-06 02:36:31.627064+00
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: herald; Owner: -
--

COPY herald.schema_migrations (version, name, applied_at) FROM stdin;
1	outbox	2026-12-06 02:36:31.478065+00
2	outbox channel heads	2026-12-06 02:36:31.478065+00
3	partition leases and snapshot batches	2026-12-06 02:36:31.478065+00
4	time-ordered ids	2026-12-06 02:36:31.478065+00
5	archived segments	2026-12-06 02:36:31.478065+00
6	ranges in staging order	2026-12-06 02:36:31.478065+00
\.


--
-- Name: outbox_id_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_id_seq', 1, false);


--
-- Name: outbox_record_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_record_seq', 14, true);


--
-- Name: outbox_replay_id_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_replay_id_seq', 1, false);


--
-- Name: outbox_retry_qseq_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_retry_qseq_seq', 3, true);


--
-- Name: outbox_seq_seq; Type: SEQUENCE SET; Schema: herald; Owner: -
--

SELECT pg_catalog.setval('herald.outbox_seq_seq', 1, false);
