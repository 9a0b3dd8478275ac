// A real JDBC client (Debian's libpostgresql-jdbc-java) for the compatibility tests and for
// collecting the catalog queries PgJDBC sends. Run with the JDK's single-file launcher:
//
//   java -cp /usr/share/java/postgresql.jar Client.java HOST PORT DB USER PASSWORD STEP...
//
// STEP is `meta` (DatabaseMetaData introspection), `sql:<text>` (a PreparedStatement),
// `stmt:<text>` (a plain Statement), `int:<n>:<text>` / `str:<s>:<text>` (a PreparedStatement
// with one `?` parameter set by setInt / setString), `date:<d>|<text>` / `ts:<t>|<text>` (setDate /
// setTimestamp) or `xml:<text>` (an EXPLAIN (FORMAT XML) read
// as DBeaver reads it: in a transaction, getSQLXML, DOM <explain><Query><Plan>, nested
// <Plans><Plan>, rolled back). One JSON object per step is printed on stdout.
import java.sql.*;
import java.util.*;
import javax.xml.parsers.DocumentBuilderFactory;
import org.w3c.dom.*;

public class Client {
    static String q(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        StringBuilder b = new StringBuilder("\"");
        for (char c : o.toString().toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String rows(ResultSet rs, String... cols) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        List<String> out = new ArrayList<>();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            if (cols.length == 0) {
                for (int i = 1; i <= md.getColumnCount(); i++) row.add(q(rs.getObject(i)));
            } else {
                for (String c : cols) row.add(q(rs.getObject(c)));
            }
            out.add("[" + String.join(",", row) + "]");
        }
        rs.close();
        return "[" + String.join(",", out) + "]";
    }

    static String columns(ResultSetMetaData md) throws SQLException {
        List<String> out = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) out.add(q(md.getColumnLabel(i)));
        return "[" + String.join(",", out) + "]";
    }

    static String meta(Connection c) throws SQLException {
        DatabaseMetaData md = c.getMetaData();
        StringBuilder b = new StringBuilder("{\"step\":\"meta\",\"ok\":true");
        b.append(",\"product\":").append(q(md.getDatabaseProductVersion()));
        b.append(",\"tables\":").append(rows(md.getTables(null, null, "%", new String[] {"TABLE", "VIEW"}), "TABLE_SCHEM", "TABLE_NAME"));
        b.append(",\"columns\":").append(rows(md.getColumns(null, "public", "%", "%"), "TABLE_NAME", "COLUMN_NAME", "TYPE_NAME"));
        b.append(",\"schemas\":").append(rows(md.getSchemas(), "TABLE_SCHEM"));
        b.append(",\"catalogs\":").append(rows(md.getCatalogs(), "TABLE_CAT"));
        b.append(",\"type_info\":").append(rows(md.getTypeInfo(), "TYPE_NAME", "DATA_TYPE"));
        b.append(",\"functions\":").append(rows(md.getFunctions(null, "pg_catalog", "concat_ws"), "FUNCTION_SCHEM", "FUNCTION_NAME"));
        b.append(",\"function_columns\":").append(rows(md.getFunctionColumns(null, "pg_catalog", "concat_ws", "%"), "FUNCTION_NAME", "COLUMN_NAME", "TYPE_NAME"));
        List<String> names = new ArrayList<>();
        ResultSet t = md.getTables(null, "public", "%", new String[] {"TABLE"});
        while (t.next()) names.add(t.getString("TABLE_NAME"));
        t.close();
        List<String> pks = new ArrayList<>(), fks = new ArrayList<>(), idx = new ArrayList<>();
        for (String n : names) {
            pks.add(rows(md.getPrimaryKeys(null, "public", n), "TABLE_NAME", "COLUMN_NAME"));
            fks.add(rows(md.getImportedKeys(null, "public", n), "FKTABLE_NAME", "FKCOLUMN_NAME", "PKTABLE_NAME"));
            idx.add(rows(md.getIndexInfo(null, "public", n, false, true), "TABLE_NAME", "INDEX_NAME", "CARDINALITY", "PAGES"));
        }
        b.append(",\"primary_keys\":[").append(String.join(",", pks)).append("]");
        b.append(",\"foreign_keys\":[").append(String.join(",", fks)).append("]");
        b.append(",\"indexes\":[").append(String.join(",", idx)).append("]");
        return b.append("}").toString();
    }

    static List<Element> children(Node parent, String name) {
        List<Element> out = new ArrayList<>();
        for (Node n = parent.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (n instanceof Element && n.getNodeName().equals(name)) out.add((Element) n);
        }
        return out;
    }

    static String text(Element e, String name) {
        List<Element> found = children(e, name);
        return found.isEmpty() ? null : found.get(0).getTextContent();
    }

    // Each plan node as [Node-Type, Total-Cost, Plan-Rows, depth], parents first.
    static void planNodes(Element plan, int depth, List<String> out) {
        out.add("[" + q(text(plan, "Node-Type")) + "," + q(text(plan, "Total-Cost")) + ","
                + q(text(plan, "Plan-Rows")) + "," + depth + "]");
        for (Element plans : children(plan, "Plans")) {
            for (Element p : children(plans, "Plan")) planNodes(p, depth + 1, out);
        }
    }

    static String xml(Connection c, String step, String text) throws Exception {
        c.setAutoCommit(false);
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(text)) {
            rs.next();
            String type = rs.getMetaData().getColumnTypeName(1);
            SQLXML x = rs.getSQLXML(1);
            Document d = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(x.getBinaryStream());
            List<String> nodes = new ArrayList<>();
            for (Element query : children(d.getDocumentElement(), "Query")) {
                for (Element plan : children(query, "Plan")) planNodes(plan, 0, nodes);
            }
            return "{\"step\":" + q(step) + ",\"ok\":true,\"type\":" + q(type) + ",\"root\":"
                    + q(d.getDocumentElement().getNodeName()) + ",\"nodes\":[" + String.join(",", nodes) + "]}";
        } finally {
            c.rollback();
            c.setAutoCommit(true);
        }
    }

    static String run(Connection c, String step) {
        try {
            if (step.equals("meta")) return meta(c);
            if (step.startsWith("xml:")) return xml(c, step, step.substring(4));
            if (step.startsWith("date:") || step.startsWith("ts:")) {
                // `date:<yyyy-mm-dd>|<text>` / `ts:<yyyy-mm-dd hh:mm:ss>|<text>`: setDate / setTimestamp,
                // which PgJDBC sends as text of unspecified type with a zone ("2025-06-01 +00")
                int colon = step.indexOf(':'), bar = step.indexOf('|');
                String value = step.substring(colon + 1, bar);
                PreparedStatement ps = c.prepareStatement(step.substring(bar + 1));
                if (step.startsWith("date:")) ps.setDate(1, java.sql.Date.valueOf(value));
                else ps.setTimestamp(1, Timestamp.valueOf(value));
                ResultSet rs = ps.executeQuery();
                String cols = columns(rs.getMetaData());
                return "{\"step\":" + q(step) + ",\"ok\":true,\"columns\":" + cols + ",\"rows\":" + rows(rs) + "}";
            }
            if (step.startsWith("int:") || step.startsWith("str:")) {
                String[] parts = step.split(":", 3);
                PreparedStatement ps = c.prepareStatement(parts[2]);
                if (parts[0].equals("int")) ps.setInt(1, Integer.parseInt(parts[1]));
                else ps.setString(1, parts[1]);
                ResultSet rs = ps.executeQuery();
                String cols = columns(rs.getMetaData());
                return "{\"step\":" + q(step) + ",\"ok\":true,\"columns\":" + cols + ",\"rows\":" + rows(rs) + "}";
            }
            boolean prepared = step.startsWith("sql:");
            String text = step.substring(prepared ? 4 : 5);
            ResultSet rs;
            if (prepared) {
                PreparedStatement ps = c.prepareStatement(text);
                rs = ps.executeQuery();
            } else {
                rs = c.createStatement().executeQuery(text);
            }
            String cols = columns(rs.getMetaData());
            return "{\"step\":" + q(step) + ",\"ok\":true,\"columns\":" + cols + ",\"rows\":" + rows(rs) + "}";
        } catch (SQLException e) {
            return "{\"step\":" + q(step) + ",\"ok\":false,\"sqlstate\":" + q(e.getSQLState()) + ",\"message\":" + q(e.getMessage()) + "}";
        } catch (Exception e) {
            return "{\"step\":" + q(step) + ",\"ok\":false,\"sqlstate\":null,\"message\":" + q(e.toString()) + "}";
        }
    }

    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.setProperty("user", a[3]);
        p.setProperty("password", a[4]);
        p.setProperty("ApplicationName", "jdbc");
        p.setProperty("sslmode", "disable");
        String url = "jdbc:postgresql://" + a[0] + ":" + a[1] + "/" + a[2];
        try (Connection c = DriverManager.getConnection(url, p)) {
            c.setAutoCommit(true);
            for (int i = 5; i < a.length; i++) System.out.println(run(c, a[i]));
        }
    }
}
