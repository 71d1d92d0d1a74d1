#ifndef JOTTER_CLIBPQ_SHIM_H
#define JOTTER_CLIBPQ_SHIM_H

/* PostgreSQL's client library (Debian's libpq-dev), for the relay's shared store. */
#include <postgresql/libpq-fe.h>
#include <dlfcn.h>

/* libpq is opened at its first use, not linked (see PostgresLibrary.swift): only a relay on PostgreSQL
   maps it and the libraries it pulls in. These are the functions Jotter calls, found in the opened
   library; every call goes through one of the wrappers below. */
typedef struct {
    PGconn *(*connectdb)(const char *conninfo);
    ConnStatusType (*status)(const PGconn *connection);
    char *(*errorMessage)(const PGconn *connection);
    void (*finish)(PGconn *connection);
    PQnoticeProcessor (*setNoticeProcessor)(PGconn *connection, PQnoticeProcessor processor, void *argument);
    PGresult *(*execParams)(PGconn *connection, const char *command, int count, const Oid *types,
                            const char *const *values, const int *lengths, const int *formats, int resultFormat);
    void (*clear)(PGresult *result);
    ExecStatusType (*resultStatus)(const PGresult *result);
    char *(*resultErrorField)(const PGresult *result, int field);
    int (*ntuples)(const PGresult *result);
    int (*nfields)(const PGresult *result);
    int (*getisnull)(const PGresult *result, int row, int column);
    int (*getlength)(const PGresult *result, int row, int column);
    char *(*getvalue)(const PGresult *result, int row, int column);
    int (*socket)(const PGconn *connection);
    int (*consumeInput)(PGconn *connection);
    PGnotify *(*notifies)(PGconn *connection);
    void (*freemem)(void *pointer);
} jotter_pq_functions;

/* Fills `functions` from `library` (a dlopen handle); returns the first symbol not found, or NULL. */
static inline const char *jotter_pq_resolve(void *library, jotter_pq_functions *functions) {
#define JOTTER_PQ_RESOLVE(field, symbol) \
    if ((*(void **)&functions->field = dlsym(library, #symbol)) == NULL) return #symbol;
    JOTTER_PQ_RESOLVE(connectdb, PQconnectdb)
    JOTTER_PQ_RESOLVE(status, PQstatus)
    JOTTER_PQ_RESOLVE(errorMessage, PQerrorMessage)
    JOTTER_PQ_RESOLVE(finish, PQfinish)
    JOTTER_PQ_RESOLVE(setNoticeProcessor, PQsetNoticeProcessor)
    JOTTER_PQ_RESOLVE(execParams, PQexecParams)
    JOTTER_PQ_RESOLVE(clear, PQclear)
    JOTTER_PQ_RESOLVE(resultStatus, PQresultStatus)
    JOTTER_PQ_RESOLVE(resultErrorField, PQresultErrorField)
    JOTTER_PQ_RESOLVE(ntuples, PQntuples)
    JOTTER_PQ_RESOLVE(nfields, PQnfields)
    JOTTER_PQ_RESOLVE(getisnull, PQgetisnull)
    JOTTER_PQ_RESOLVE(getlength, PQgetlength)
    JOTTER_PQ_RESOLVE(getvalue, PQgetvalue)
    JOTTER_PQ_RESOLVE(socket, PQsocket)
    JOTTER_PQ_RESOLVE(consumeInput, PQconsumeInput)
    JOTTER_PQ_RESOLVE(notifies, PQnotifies)
    JOTTER_PQ_RESOLVE(freemem, PQfreemem)
#undef JOTTER_PQ_RESOLVE
    return NULL;
}

typedef const jotter_pq_functions *jotter_pq;

static inline PGconn *jotter_PQconnectdb(jotter_pq pq, const char *conninfo) { return pq->connectdb(conninfo); }
static inline ConnStatusType jotter_PQstatus(jotter_pq pq, const PGconn *connection) { return pq->status(connection); }
static inline char *jotter_PQerrorMessage(jotter_pq pq, const PGconn *connection) { return pq->errorMessage(connection); }
static inline void jotter_PQfinish(jotter_pq pq, PGconn *connection) { pq->finish(connection); }

static inline PQnoticeProcessor jotter_PQsetNoticeProcessor(jotter_pq pq, PGconn *connection, PQnoticeProcessor processor,
                                                            void *argument) {
    return pq->setNoticeProcessor(connection, processor, argument);
}

static inline PGresult *jotter_PQexecParams(jotter_pq pq, PGconn *connection, const char *command, int count,
                                            const Oid *types, const char *const *values, const int *lengths,
                                            const int *formats, int resultFormat) {
    return pq->execParams(connection, command, count, types, values, lengths, formats, resultFormat);
}

static inline void jotter_PQclear(jotter_pq pq, PGresult *result) { pq->clear(result); }
static inline ExecStatusType jotter_PQresultStatus(jotter_pq pq, const PGresult *result) { return pq->resultStatus(result); }

static inline char *jotter_PQresultErrorField(jotter_pq pq, const PGresult *result, int field) {
    return pq->resultErrorField(result, field);
}

static inline int jotter_PQntuples(jotter_pq pq, const PGresult *result) { return pq->ntuples(result); }
static inline int jotter_PQnfields(jotter_pq pq, const PGresult *result) { return pq->nfields(result); }

static inline int jotter_PQgetisnull(jotter_pq pq, const PGresult *result, int row, int column) {
    return pq->getisnull(result, row, column);
}

static inline int jotter_PQgetlength(jotter_pq pq, const PGresult *result, int row, int column) {
    return pq->getlength(result, row, column);
}

static inline char *jotter_PQgetvalue(jotter_pq pq, const PGresult *result, int row, int column) {
    return pq->getvalue(result, row, column);
}

static inline int jotter_PQsocket(jotter_pq pq, const PGconn *connection) { return pq->socket(connection); }
static inline int jotter_PQconsumeInput(jotter_pq pq, PGconn *connection) { return pq->consumeInput(connection); }
static inline PGnotify *jotter_PQnotifies(jotter_pq pq, PGconn *connection) { return pq->notifies(connection); }
static inline void jotter_PQfreemem(jotter_pq pq, void *pointer) { pq->freemem(pointer); }

#endif
