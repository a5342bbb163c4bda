/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-access.c — access.c: who may call what on /io/kgpu/Broker1, the one rule of the
 * bus and the peer socket.
 */

#include <check.h>
#include <unistd.h>

#include "common/bus-names.h"
#include "daemons/broker/access.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/peer.h"
#include "tests/unit/test-main.h"

#define GRPC_UID 41000
#define CLUSTER_UID 42000
#define OTHER_UID 43000

static void manager_init(Manager *m, Config *c) {
        *c = (Config) { .grpc_user = (char *) "kgpu", .cluster_user = (char *) "kgpu-cluster" };
        *m = (Manager) { .config = c, .grpc_uid = GRPC_UID, .cluster_uid = CLUSTER_UID };
}

START_TEST(test_access_callers) {
        static const char *const reads[] = { "ListResources", "GetDevices", "GetPreferredAllocation",
                                             "ListAllocations" };
        static const char *const grpc[] = { "Allocate", "PreStartContainer", "Reconcile", "Reload", "NoSuchMember" };

        for (size_t i = 0; i < ELEMENTSOF(reads); i++)
                ck_assert_int_eq(broker_access_callers(KGPU_BROKER_INTERFACE, reads[i]), BROKER_CALLERS_ANYONE);
        for (size_t i = 0; i < ELEMENTSOF(grpc); i++)
                ck_assert_int_eq(broker_access_callers(KGPU_BROKER_INTERFACE, grpc[i]), BROKER_CALLERS_GRPC);
        ck_assert_int_eq(broker_access_callers(KGPU_BROKER_INTERFACE, "SetNodeConfig"), BROKER_CALLERS_CLUSTER);
        ck_assert_int_eq(broker_access_callers(KGPU_BROKER_INTERFACE, "SetGasPods"), BROKER_CALLERS_CLUSTER);
        ck_assert_int_eq(broker_access_callers(KGPU_BROKER_INTERFACE, NULL), BROKER_CALLERS_GRPC);

        ck_assert_int_eq(broker_access_callers("org.freedesktop.DBus.Introspectable", "Introspect"),
                         BROKER_CALLERS_ANYONE);
        ck_assert_int_eq(broker_access_callers("org.freedesktop.DBus.Peer", "Ping"), BROKER_CALLERS_ANYONE);
        ck_assert_int_eq(broker_access_callers("org.freedesktop.DBus.Properties", "Get"), BROKER_CALLERS_ANYONE);
        ck_assert_int_eq(broker_access_callers("org.freedesktop.DBus.Properties", "GetAll"), BROKER_CALLERS_ANYONE);
        /* The default policy lets nobody else Set; nothing is writable anyway. */
        ck_assert_int_eq(broker_access_callers("org.freedesktop.DBus.Properties", "Set"), BROKER_CALLERS_GRPC);
        /* A call without an interface cannot slip past an interface rule. */
        ck_assert_int_eq(broker_access_callers(NULL, "ListResources"), BROKER_CALLERS_GRPC);
        ck_assert_int_eq(broker_access_callers(NULL, "Allocate"), BROKER_CALLERS_GRPC);
        ck_assert_int_eq(broker_access_callers("org.example.Other", "ListResources"), BROKER_CALLERS_GRPC);
}
END_TEST

START_TEST(test_access_allowed) {
        Manager m;
        Config c;

        manager_init(&m, &c);
        for (BrokerCallers k = BROKER_CALLERS_ANYONE; k <= BROKER_CALLERS_CLUSTER; k++) {
                ck_assert(broker_access_allowed(&m, 0, k));
                ck_assert(broker_access_allowed(&m, geteuid(), k));
                ck_assert(!broker_access_allowed(&m, (uid_t) -1, k));
        }
        ck_assert(broker_access_allowed(&m, GRPC_UID, BROKER_CALLERS_GRPC));
        ck_assert(!broker_access_allowed(&m, GRPC_UID, BROKER_CALLERS_CLUSTER));
        ck_assert(broker_access_allowed(&m, CLUSTER_UID, BROKER_CALLERS_CLUSTER));
        ck_assert(!broker_access_allowed(&m, CLUSTER_UID, BROKER_CALLERS_GRPC));
        ck_assert(broker_access_allowed(&m, OTHER_UID, BROKER_CALLERS_ANYONE));
        ck_assert(!broker_access_allowed(&m, OTHER_UID, BROKER_CALLERS_GRPC));
        ck_assert(!broker_access_allowed(&m, OTHER_UID, BROKER_CALLERS_CLUSTER));

        ck_assert(broker_access_trusted(&m, GRPC_UID));
        ck_assert(broker_access_trusted(&m, CLUSTER_UID));
        ck_assert(broker_access_trusted(&m, 0));
        ck_assert(!broker_access_trusted(&m, OTHER_UID));

        /* A user that does not exist is nobody's uid. */
        m.grpc_uid = m.cluster_uid = (uid_t) -1;
        ck_assert(!broker_access_allowed(&m, GRPC_UID, BROKER_CALLERS_GRPC));
        ck_assert(!broker_access_allowed(&m, (uid_t) -1, BROKER_CALLERS_CLUSTER));
        ck_assert(!broker_access_trusted(&m, CLUSTER_UID));

        ck_assert_str_eq(broker_access_user(&m, BROKER_CALLERS_GRPC), "kgpu");
        ck_assert_str_eq(broker_access_user(&m, BROKER_CALLERS_CLUSTER), "kgpu-cluster");
}
END_TEST

/* What PrivateUsers= makes of /proc/self/uid_map: root and the unit's own user. */
START_TEST(test_access_uid_map) {
        const char *initial = "         0          0 4294967295\n";
        const char *private_users = "         0          0          1\n       995        995          1\n";

        ck_assert(broker_peer_uid_mapped(initial, 999));
        ck_assert(broker_peer_uid_mapped(private_users, 0));
        ck_assert(broker_peer_uid_mapped(private_users, 995));
        ck_assert(!broker_peer_uid_mapped(private_users, 999));
        ck_assert(!broker_peer_uid_mapped(private_users, 996));
        ck_assert(!broker_peer_uid_mapped("", 0));
        ck_assert(!broker_peer_uid_mapped("garbage\n", 0));
        ck_assert(broker_peer_uid_mapped("1000 0 10\n", 1009));
        ck_assert(!broker_peer_uid_mapped("1000 0 10\n", 1010));
}
END_TEST

static Suite *access_suite(void) {
        Suite *s = suite_create("access");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_access_callers);
        tcase_add_test(tc, test_access_allowed);
        tcase_add_test(tc, test_access_uid_map);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(access_suite)
