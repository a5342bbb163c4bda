/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-kube-json.c — the API server's JSON: parse bounds, List, Status, Node label, Pod
 * GAS tuple, watch events, quantities, and the pod store fed from them. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/cluster/kube-json.h"
#include "daemons/cluster/pod-store.h"
#include "tests/unit/test-main.h"

static json_object *parse(const char *s) {
        json_object *o = NULL;

        ck_assert_int_eq(kube_json_parse(s, strlen(s), &o), 0);
        return o;
}

START_TEST(test_parse_bounds) {
        json_object *o = NULL;
        char deep[2 * (KUBE_JSON_DEPTH_MAX + 2) + 1];
        size_t n = KUBE_JSON_DEPTH_MAX + 2;

        ck_assert_int_eq(kube_json_parse("{\"a\":1}  \n", 10, &o), 0);
        json_object_put(o);
        ck_assert_int_eq(kube_json_parse("{\"a\":1} x", 9, &o), -EBADMSG);
        ck_assert_int_eq(kube_json_parse("{\"a\":1}{}", 9, &o), -EBADMSG);
        ck_assert_int_eq(kube_json_parse("{\"a\":", 5, &o), -EBADMSG);
        ck_assert_int_eq(kube_json_parse("", 0, &o), -EBADMSG);
        ck_assert_int_eq(kube_json_parse("{\"a\":1}\0", 8, &o), -EBADMSG);
        /* Deeper than the bound: refused, no stack spent on it. */
        for (size_t i = 0; i < n; i++) {
                deep[i] = '[';
                deep[n + i] = ']';
        }
        deep[2 * n] = '\0';
        ck_assert_int_eq(kube_json_parse(deep, strlen(deep), &o), -EBADMSG);
}
END_TEST

START_TEST(test_list_and_status) {
        _cleanup_(json_object_putp) json_object *l = parse(
                "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"42\"},\"items\":[{}]}");
        _cleanup_(json_object_putp) json_object *e = parse(
                "{\"kind\":\"NodeList\",\"metadata\":{\"resourceVersion\":\"7\"},\"items\":null}");
        _cleanup_(json_object_putp) json_object *bad = parse(
                "{\"kind\":\"PodList\",\"metadata\":{},\"items\":[]}");
        _cleanup_(json_object_putp) json_object *st = parse(
                "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
                "\"message\":\"too old resource version: 5 (9)\",\"reason\":\"Expired\",\"code\":410}");
        _cleanup_(json_object_putp) json_object *notst = parse("{\"kind\":\"Pod\",\"code\":410}");
        const char *rv, *why;
        json_object *items;
        KubeStatus s = {};

        ck_assert_int_eq(kube_list_read(l, &rv, &items, &why), 0);
        ck_assert_str_eq(rv, "42");
        ck_assert_uint_eq(json_object_array_length(items), 1);
        ck_assert_int_eq(kube_list_read(e, &rv, &items, &why), 0);
        ck_assert_ptr_null(items);
        ck_assert_int_eq(kube_list_read(bad, &rv, &items, &why), -EBADMSG);
        ck_assert_str_eq(why, "no metadata.resourceVersion");
        ck_assert_int_eq(kube_list_read(st, &rv, &items, &why), -EBADMSG);

        ck_assert_int_eq(kube_status_read(st, &s, &why), 0);
        ck_assert_int_eq(s.code, 410);
        ck_assert_str_eq(s.reason, "Expired");
        ck_assert_str_eq(s.message, "too old resource version: 5 (9)");
        kube_status_done(&s);
        ck_assert_int_eq(kube_status_read(notst, &s, &why), -EBADMSG);
}
END_TEST

START_TEST(test_node_label) {
        _cleanup_(json_object_putp) json_object *n = parse(
                "{\"kind\":\"Node\",\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"3\","
                "\"labels\":{\"nvidia.com/device-plugin.config\":\"mps-4\",\"x\":\"y\"}}}");
        _cleanup_(json_object_putp) json_object *none = parse("{\"metadata\":{\"name\":\"n1\"}}");
        _cleanup_(json_object_putp) json_object *num = parse(
                "{\"metadata\":{\"name\":\"n1\",\"labels\":{\"nvidia.com/device-plugin.config\":4}}}");
        _cleanup_(json_object_putp) json_object *nul = parse(
                "{\"metadata\":{\"name\":\"n1\",\"labels\":{\"nvidia.com/device-plugin.config\":\"a\\u0000b\"}}}");
        const char *name, *why;
        char *v = NULL;

        ck_assert_int_eq(kube_node_label(n, "nvidia.com/device-plugin.config", &name, &v, &why), 0);
        ck_assert_str_eq(name, "n1");
        ck_assert_str_eq(v, "mps-4");
        free(v);
        ck_assert_int_eq(kube_node_label(none, "nvidia.com/device-plugin.config", &name, &v, &why), 0);
        ck_assert_ptr_null(v);
        ck_assert_int_eq(kube_node_label(num, "nvidia.com/device-plugin.config", &name, &v, &why), -EBADMSG);
        ck_assert_int_eq(kube_node_label(nul, "nvidia.com/device-plugin.config", &name, &v, &why), -EBADMSG);
}
END_TEST

#define POD(phase, annotations, containers)                                                     \
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u-1\","    \
        "\"resourceVersion\":\"9\",\"annotations\":{" annotations "}},"                          \
        "\"spec\":{\"nodeName\":\"n1\",\"containers\":[" containers "]},"                        \
        "\"status\":{\"phase\":\"" phase "\"}}"

START_TEST(test_pod_gas) {
        _cleanup_(json_object_putp) json_object *p = parse(POD("Pending",
                "\"gas-ts\":\"1700\",\"gas-container-cards\":\"card0|card1\",\"other\":\"x\"",
                "{\"name\":\"a\",\"resources\":{\"limits\":{\"gpu.intel.com/i915\":\"1\","
                "\"gpu.intel.com/millicores\":\"500\",\"gpu.intel.com/memory.max\":\"1Gi\",\"cpu\":\"2\"}}},"
                "{\"name\":\"b\"},"
                "{\"name\":\"c\",\"resources\":{\"limits\":{\"gpu.intel.com/i915\":2}}}"));
        _cleanup_(gas_pod_freep) GasPod *g = NULL;
        const char *why;

        ck_assert_int_eq(kube_pod_gas_read(p, &g, &why), 0);
        ck_assert_ptr_nonnull(g);
        ck_assert_str_eq(g->uid, "u-1");
        ck_assert_str_eq(g->namespace, "ns");
        ck_assert_str_eq(g->name, "p");
        ck_assert_str_eq(g->ts, "1700");
        ck_assert_str_eq(g->cards, "card0|card1");
        ck_assert_str_eq(g->tiles, "");
        ck_assert_uint_eq(g->n_containers, 3);
        ck_assert_uint_eq(g->containers[0].n_limits, 3);
        for (size_t i = 0; i < 3; i++) {
                const char *nm = g->containers[0].names[i];
                int64_t c = g->containers[0].counts[i];

                if (streq(nm, "gpu.intel.com/i915"))
                        ck_assert_int_eq(c, 1);
                else if (streq(nm, "gpu.intel.com/millicores"))
                        ck_assert_int_eq(c, 500);
                else if (streq(nm, "gpu.intel.com/memory.max"))
                        ck_assert_int_eq(c, 1073741824);
                else
                        ck_abort_msg("unexpected limit %s", nm);
        }
        ck_assert_uint_eq(g->containers[1].n_limits, 0);
        ck_assert_uint_eq(g->containers[2].n_limits, 1);
        ck_assert_int_eq(g->containers[2].counts[0], 2);
}
END_TEST

START_TEST(test_pod_not_gas) {
        _cleanup_(json_object_putp) json_object *running = parse(POD("Running", "\"gas-ts\":\"1\"", "{\"name\":\"a\"}"));
        _cleanup_(json_object_putp) json_object *nots = parse(POD("Pending", "\"gas-container-cards\":\"card0\"",
                                                                  "{\"name\":\"a\"}"));
        _cleanup_(json_object_putp) json_object *frac = parse(POD("Pending", "\"gas-ts\":\"1\"",
                "{\"name\":\"a\",\"resources\":{\"limits\":{\"gpu.intel.com/i915\":\"500m\"}}}"));
        _cleanup_(json_object_putp) json_object *tsnum = parse(POD("Pending", "\"gas-ts\":1", "{\"name\":\"a\"}"));
        _cleanup_(json_object_putp) json_object *nocont = parse(
                "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\",\"annotations\":{\"gas-ts\":\"1\"}},"
                "\"spec\":{},\"status\":{\"phase\":\"Pending\"}}");
        GasPod *g = (GasPod *) 1;
        const char *why;

        ck_assert_int_eq(kube_pod_gas_read(running, &g, &why), 0);
        ck_assert_ptr_null(g);
        g = (GasPod *) 1;
        ck_assert_int_eq(kube_pod_gas_read(nots, &g, &why), 0);
        ck_assert_ptr_null(g);
        ck_assert_int_eq(kube_pod_gas_read(frac, &g, &why), -EBADMSG);
        ck_assert_str_eq(why, "Pod gpu.intel.com/ limit is not an integer quantity");
        ck_assert_int_eq(kube_pod_gas_read(tsnum, &g, &why), -EBADMSG);
        ck_assert_int_eq(kube_pod_gas_read(nocont, &g, &why), -EBADMSG);
}
END_TEST

START_TEST(test_pod_bounds) {
        /* 65 containers, and an annotation over 4096 bytes: left out, never sent. */
        _cleanup_free_ char *many = NULL, *containers = NULL, *longv = NULL, *longpod = NULL;
        json_object *o;
        GasPod *g = NULL;
        const char *why;
        size_t n = 0;

        containers = calloc(65, 16);
        for (int i = 0; i < 65; i++)
                n += (size_t) sprintf(containers + n, "%s{\"name\":\"c%d\"}", i ? "," : "", i);
        ck_assert_int_ge(asprintf(&many, POD("Pending", "\"gas-ts\":\"1\"", "%s"), containers), 0);
        o = parse(many);
        ck_assert_int_eq(kube_pod_gas_read(o, &g, &why), -EBADMSG);
        json_object_put(o);

        longv = malloc(4098);
        memset(longv, 'x', 4097);
        longv[4097] = '\0';
        ck_assert_int_ge(asprintf(&longpod, POD("Pending", "\"gas-ts\":\"1\",\"gas-container-tiles\":\"%s\"",
                                                "{\"name\":\"a\"}"), longv), 0);
        o = parse(longpod);
        ck_assert_int_eq(kube_pod_gas_read(o, &g, &why), -EBADMSG);
        json_object_put(o);
        ck_assert_ptr_null(g);
}
END_TEST

START_TEST(test_quantities) {
        int64_t v;

        ck_assert_int_eq(kube_quantity_integer("3", &v), 0);
        ck_assert_int_eq(v, 3);
        ck_assert_int_eq(kube_quantity_integer("2k", &v), 0);
        ck_assert_int_eq(v, 2000);
        ck_assert_int_eq(kube_quantity_integer("16Gi", &v), 0);
        ck_assert_int_eq(v, 17179869184LL);
        ck_assert_int_eq(kube_quantity_integer("7Ei", &v), 0);
        ck_assert_int_eq(kube_quantity_integer("8Ei", &v), -ERANGE);
        ck_assert_int_eq(kube_quantity_integer("9223372036854775807", &v), 0);
        ck_assert_int_eq(kube_quantity_integer("9223372036854775808", &v), -ERANGE);
        ck_assert_int_eq(kube_quantity_integer("500m", &v), -EINVAL);
        ck_assert_int_eq(kube_quantity_integer("1.5", &v), -EINVAL);
        ck_assert_int_eq(kube_quantity_integer("-1", &v), -EINVAL);
        ck_assert_int_eq(kube_quantity_integer("1e3", &v), -EINVAL);
        ck_assert_int_eq(kube_quantity_integer("", &v), -EINVAL);
        ck_assert_int_eq(kube_quantity_integer("1Ki ", &v), -EINVAL);
}
END_TEST

START_TEST(test_watch_events) {
        _cleanup_(json_object_putp) json_object *a = parse(
                "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"12\"}}}");
        _cleanup_(json_object_putp) json_object *b = parse("{\"type\":\"RENAMED\",\"object\":{}}");
        _cleanup_(json_object_putp) json_object *c = parse("{\"type\":\"ADDED\",\"object\":[]}");
        _cleanup_(json_object_putp) json_object *d = parse("[1]");
        KubeWatchType t;
        json_object *obj;
        const char *why, *rv;

        ck_assert_int_eq(kube_watch_event_read(a, &t, &obj, &why), 0);
        ck_assert_int_eq(t, KUBE_WATCH_BOOKMARK);
        ck_assert_int_eq(kube_object_rv(obj, &rv, &why), 0);
        ck_assert_str_eq(rv, "12");
        ck_assert_int_eq(kube_watch_event_read(b, &t, &obj, &why), -EBADMSG);
        ck_assert_int_eq(kube_watch_event_read(c, &t, &obj, &why), -EBADMSG);
        ck_assert_int_eq(kube_watch_event_read(d, &t, &obj, &why), -EBADMSG);
}
END_TEST

START_TEST(test_pod_store) {
        _cleanup_(json_object_putp) json_object *items = parse(
                "[" POD("Pending", "\"gas-ts\":\"1\"", "{\"name\":\"a\"}") ","
                "{\"metadata\":{\"name\":\"q\",\"namespace\":\"ns\",\"uid\":\"u-2\"},\"status\":{\"phase\":\"Pending\"}}]");
        _cleanup_(json_object_putp) json_object *newer = parse(POD("Pending", "\"gas-ts\":\"2\"", "{\"name\":\"a\"}"));
        _cleanup_(json_object_putp) json_object *ran = parse(POD("Running", "\"gas-ts\":\"2\"", "{\"name\":\"a\"}"));
        _cleanup_(json_object_putp) json_object *noid = parse("[{\"metadata\":{}}]");
        PodStore s = {};
        const char *why;
        uint64_t g;

        ck_assert_int_eq(pod_store_replace(&s, items, &why), 1);
        ck_assert_uint_eq(s.n_pods, 1);
        g = s.generation;
        /* The same List again changes nothing. */
        ck_assert_int_eq(pod_store_replace(&s, items, &why), 0);
        ck_assert_uint_eq(s.generation, g);
        /* A List with an item that is no Pod is refused whole; the store stays. */
        ck_assert_int_eq(pod_store_replace(&s, noid, &why), -EBADMSG);
        ck_assert_uint_eq(s.n_pods, 1);
        ck_assert_int_eq(pod_store_apply(&s, KUBE_WATCH_MODIFIED, newer, &why), 1);
        ck_assert_str_eq(s.pods[0]->ts, "2");
        ck_assert_int_eq(pod_store_apply(&s, KUBE_WATCH_MODIFIED, newer, &why), 0);
        ck_assert_int_eq(pod_store_apply(&s, KUBE_WATCH_MODIFIED, ran, &why), 1);
        ck_assert_uint_eq(s.n_pods, 0);
        ck_assert_int_eq(pod_store_apply(&s, KUBE_WATCH_ADDED, newer, &why), 1);
        ck_assert_int_eq(pod_store_apply(&s, KUBE_WATCH_DELETED, newer, &why), 1);
        ck_assert_int_eq(pod_store_apply(&s, KUBE_WATCH_DELETED, newer, &why), 0);
        ck_assert_uint_eq(s.n_pods, 0);
        pod_store_done(&s);
}
END_TEST

static Suite *kube_json_suite(void) {
        Suite *s = suite_create("kube-json");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_parse_bounds);
        tcase_add_test(tc, test_list_and_status);
        tcase_add_test(tc, test_node_label);
        tcase_add_test(tc, test_pod_gas);
        tcase_add_test(tc, test_pod_not_gas);
        tcase_add_test(tc, test_pod_bounds);
        tcase_add_test(tc, test_quantities);
        tcase_add_test(tc, test_watch_events);
        tcase_add_test(tc, test_pod_store);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(kube_json_suite)
